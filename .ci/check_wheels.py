"""The built wheels carry what an install needs: every kernel source of the checkout (a wheel
without them falls back to the slow torch path), py.typed in each import package, LICENSE.

    python .ci/check_wheels.py WHEEL_DIR
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# distribution wheel → {folder in the checkout: folder in the wheel} of its import packages
PACKAGES = {
    "agentrt": {"agentrt": "agentrt", "kernels/agentrt_kernels": "agentrt_kernels",
                "tools/agentrt_tools": "agentrt_tools"},
    "langchain_agentrt": {"integrations/langchain/langchain_agentrt": "langchain_agentrt"},
    "llama_index_llms_agentrt": {
        "integrations/llama_index/llama_index/llms/agentrt": "llama_index/llms/agentrt",
        "integrations/llama_index/llama_index/embeddings/agentrt":
            "llama_index/embeddings/agentrt"},
}


def missing_from(wheel: Path, packages: dict[str, str]) -> list[str]:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing: list[str] = []
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        missing.append("LICENSE")
    for folder, target in packages.items():
        if f"{target}/py.typed" not in names:
            missing.append(f"{target}/py.typed")
        for source in sorted((ROOT / folder).rglob("*.cpp")):
            name = f"{target}/{source.relative_to(ROOT / folder).as_posix()}"
            if name not in names:
                missing.append(name)
    return missing


def main(wheel_dir: str) -> int:
    failed = False
    for dist, packages in PACKAGES.items():
        wheels = sorted(Path(wheel_dir).glob(f"{dist}-*.whl"))
        if len(wheels) != 1:
            print(f"check_wheels: expected one {dist} wheel, found {wheels}")
            failed = True
            continue
        missing = missing_from(wheels[0], packages)
        print(f"check_wheels: {wheels[0].name}: " + (f"MISSING {missing}" if missing else "ok"))
        failed |= bool(missing)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
