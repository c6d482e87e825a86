"""The Open Inference Protocol (KServe v2) beside the native /v1 API: REST under /v2 and the
`inference.GRPCInferenceService` over gRPC, both served by the gateway process over the same
fleet client, keys, quotas, deadlines and back-pressure as /v1 (docs/how-to/clients.md)."""
