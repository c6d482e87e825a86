"""Models: the registry of versions and their manifests, the one loader, the backends, the
build and `fleet models import`.

What other packages may import from here is the public surface below (common/surface.py); the
`fleet` command line imports nothing else of models (tests/unit/test_layout.py). Workers and
versions, below fleet, import the modules themselves.
"""

from common.surface import public_surface

PUBLIC = {
    # the registry: versions, manifests and their ids
    "ModelRegistry": "models.registry",
    "RegistryError": "models.registry",
    "ModelNotFound": "models.registry",
    "MANIFEST_FILE": "models.registry",
    "parse_version_id": "models.registry",
    "ModelManifest": "models.manifest",
    "ImportSource": "models.manifest",
    "local_path_of": "models.remote_files",
    "url_filesystem": "models.remote_files",
    # loading and running a version (ONNX Runtime is imported only when a backend is used)
    "ModelLoader": "models.loading",
    "RuntimeOptions": "models.backends.options",
    "OnnxEmbeddingBackend": "models.backends.onnx",
    "TokenizedBackend": "models.backends.tokenized",
    "infer_in_chunks": "models.backends.base",
    # what this install can run (`fleet doctor`)
    "Installed": "models.backends.flavour",
    "install_refusal": "models.backends.flavour",
    # `fleet models import`
    "ImportRequest": "models.importing.converted",
    "parse_labels": "models.importing.labels",
    "import_model": "models.importing.pipeline",
    "Progress": "models.build.progress",
}
__all__ = sorted(PUBLIC)
__getattr__, __dir__ = public_surface(__name__, PUBLIC)
