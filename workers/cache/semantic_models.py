"""The encoder and the verifier the semantic tier reads with, when the settings name none.

A semantic cache must read the languages its model serves: MiniLM reads most Chinese as unknown
tokens, so a worker of faq-intent-multilingual given MiniLM would look up none of its Chinese
traffic. The shipped encoder that reads with the served model's own tokenizer reads what the
model reads (e5-embed for faq-intent-multilingual, minilm-embed for faq-intent); any other model
gets minilm-embed. The verifier follows the encoder: each shipped encoder has the verifier trained
and calibrated through it (VERIFIER_OF_ENCODER). FLEET_SEMANTIC_ENCODER_MODEL and
FLEET_SEMANTIC_VERIFIER_MODEL override either.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.manifest import ModelManifest
from models.registry import ModelRegistry, RegistryError
from workers.settings import WorkerSettings

DEFAULT_ENCODER = "minilm-embed"
VERIFIER_OF_ENCODER = {"minilm-embed": "cache-verifier", "e5-embed": "cache-verifier-multilingual"}
DEFAULT_VERIFIER = VERIFIER_OF_ENCODER[DEFAULT_ENCODER]


@dataclass(frozen=True)
class SemanticModels:
    encoder: str
    verifier: str
    why: str  # how the encoder was chosen, for the worker's log

    def applied(self, settings: WorkerSettings) -> WorkerSettings:
        return settings.model_copy(update={"semantic_encoder_model": self.encoder,
                                           "semantic_verifier_model": self.verifier})


def semantic_models(settings: WorkerSettings, registry: ModelRegistry, served: ModelManifest | None = None) -> SemanticModels:
    """What the settings name, else the encoder that reads like `served` and that encoder's verifier."""
    if settings.semantic_encoder_model is not None:
        encoder, why = settings.semantic_encoder_model, "FLEET_SEMANTIC_ENCODER_MODEL"
    elif (reading := encoder_reading_like(served, registry)) is not None:
        encoder, why = reading, f"it reads with {served.name if served else '?'}'s tokenizer"
    else:
        encoder, why = DEFAULT_ENCODER, "the default"
    verifier = settings.semantic_verifier_model or VERIFIER_OF_ENCODER.get(encoder, DEFAULT_VERIFIER)
    return SemanticModels(encoder, verifier, why)


def encoder_reading_like(served: ModelManifest | None, registry: ModelRegistry) -> str | None:
    """The shipped encoder with a registered version whose tokenizer file is the served model's."""
    if served is None or served.tokenizer_file is None:
        return None
    tokenizer = served.files.get(served.tokenizer_file)
    for encoder in VERIFIER_OF_ENCODER:
        try:
            versions = registry.versions(encoder)
        except RegistryError:
            continue
        if any(version.tokenizer_file and version.files.get(version.tokenizer_file) == tokenizer for version in versions):
            return encoder
    return None
