"""The cost policy's calibration kept between generations: one file per model pair and
settings, beside the pair's costs in the cache folder and under the same key
(cost_cache.cost_key), holding one Evidence per drafter kind (model, model+lookup...).

`generate --gamma-policy cost` starts warm from it and adds its own verdicts when it ends
(calibration.keep: older generations fade). A file of another pair or settings is refused
with one line (CalibrationError): its acceptance says nothing about this pair. A file that
cannot be read as one (cut short, edited by hand, of another format) is ignored and then
replaced: a calibration is a head start, never needed for a correct run.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench import paths
from specbench.bench.costs import slug, write_json_atomic
from specbench.errors import CalibrationError
from specbench.policies.calibration import Evidence, keep

FORMAT = 2  # the file's layout and meaning (2: share leaves out declined rounds); another is ignored


def default_path(key: str) -> Path:
    """The cache folder's calibration file for `key` (beside the costs of the same key)."""
    return paths.costs_dir() / f"{slug(key)}.calibration.json"


def _read(path: Path) -> dict | None:
    """The file's contents when it is a calibration file of this format; None when it is
    missing or unreadable."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or not isinstance(raw.get("drafters"), dict):
        return None
    return raw


def read_calibration(path: Path, key: str, drafter: str) -> tuple[Evidence | None, str | None]:
    """The kept Evidence of `drafter` under `key` in the file at path, and a note when the
    file was there but unusable (None, note: start cold). A file of another key raises
    CalibrationError."""
    raw = _read(path)
    if raw is None:
        return None, (f"{path} is not a calibration file this version reads; starting cold" if path.exists() else None)
    if raw.get("key") != key:
        raise CalibrationError(
            f"{path} is the calibration of another model pair or settings ({raw.get('key')!r}); give another"
            " --calibration or delete it"
        )
    found = raw["drafters"].get(drafter)
    if found is None:
        return None, None
    try:
        return Evidence.from_json(found), None
    except ValueError as exc:
        return None, f"{path}: the {drafter} calibration is unreadable ({exc}); starting cold"


def write_calibration(path: Path, key: str, drafter: str, evidence: Evidence) -> None:
    """Add a generation's evidence to what the file keeps for `drafter` (calibration.keep)
    and write it back atomically; the other drafters' entries stay. An unreadable file is
    replaced; one of another key was refused by read_calibration before the run."""
    path = Path(path)
    raw = _read(path)
    drafters = dict(raw["drafters"]) if raw is not None and raw.get("key") == key else {}
    try:
        kept = Evidence.from_json(drafters[drafter]) if drafter in drafters else None
    except ValueError:
        kept = None
    drafters[drafter] = keep(kept, evidence).as_json()
    write_json_atomic(path, {"key": key, "format": FORMAT, "drafters": drafters})
