"""`scripts/bench cpu-split`: one batch on every core, or batches side by side on a share each?

The registered model, in-process (fleet_dev/bench/raw.py, nothing but the model on the path), at each
batch size: one batch at a time with the runtime's threads on all the cores, against the worker's
default on a CPU (workers/compute/parallelism.py), as many batches at once as it hands its model
with the cores shared out among them. Prints sentences/s and CPU per sentence for each.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fleet_dev.bench.raw import RawThroughput, measure, worker_backend
from fleet_dev.bench.workload import support_queries
from fleet.tables import format_table
from workers.compute.parallelism import batches_in_flight, cpu_threads_per_batch, usable_cores


def throughput(model: str, precision: str, threads: int, at_once: int, texts: Sequence[str], batch_size: int,
               repeats: int) -> RawThroughput:
    backend = worker_backend({"FLEET_MODEL": model, "FLEET_PRECISION": precision,
                              "FLEET_INTRA_OP_THREADS": str(threads), "FLEET_MODEL_BATCHES_IN_FLIGHT": str(at_once)})
    return measure(backend.infer, texts, batch_size, repeats, at_once)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench cpu-split", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-embed")
    parser.add_argument("--precision", nargs="+", default=["fp32", "int8"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--sentences", type=int, default=1024, help="sentences a pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the median is reported")
    args = parser.parse_args(argv)
    cores = usable_cores()
    at_once = batches_in_flight("cpu", None)
    split = cpu_threads_per_batch(0, at_once)
    texts = support_queries(args.sentences)
    print(f"{cores} usable cores; worker default: {at_once} batches at once x {split} threads each; "
          f"{args.sentences} sentences a pass, median of {args.repeats} passes", flush=True)
    rows = []
    for precision in args.precision:
        for batch_size in args.batch:
            one = throughput(args.model, precision, cores, 1, texts, batch_size, args.repeats)
            shared = throughput(args.model, precision, split, at_once, texts, batch_size, args.repeats)
            rows.append([precision, str(batch_size), f"{one.sentences_per_s:,.0f}", f"{one.cpu_ms_per_sentence:.2f}",
                         f"{shared.sentences_per_s:,.0f}", f"{shared.cpu_ms_per_sentence:.2f}",
                         f"{shared.sentences_per_s / one.sentences_per_s:.2f}x"])
            print(f"  {precision} batch {batch_size}: {one.sentences_per_s:,.0f} -> {shared.sentences_per_s:,.0f} "
                  "sentences/s", flush=True)
    print()
    print(format_table(("precision", "batch", f"1 x {cores} threads/s", "CPU ms", f"{at_once} x {split} threads/s",
                        "CPU ms", "gain"), rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
