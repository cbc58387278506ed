"""The event log a config reads (`--dataset=events` or `web_synthetic`), without TensorFlow:
its files, columns and vocabularies, its next-day days, the log read into memory
(`event_log`) or out of core into a day store (`day_store_data`).

`pipelines.experiment` reads its data through these; a process without TensorFlow (the
Keras 3 next-day job, `examples.keras_next_day`) builds and reads the same day store.
"""

import dataclasses
import functools
import hashlib
import json
import os
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

from pipelines import configs
from pipelines.data import day_store
from pipelines.data import events as events_lib
from pipelines.data import public_logs
from pipelines.data import splits as splits_lib
from pipelines.data import web_synthetic
from pipelines.run_files import RunFiles

CACHE_ENV = "TFRS_LOGQ_CACHE"


def cache_root() -> str:
    """$TFRS_LOGQ_CACHE, default ~/.cache/tfrs_logq: where logs, stores and backups made
    without a run directory live."""
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "tfrs_logq")


def web_synthetic_dir(data: configs.DataConfig) -> str:
    """Where the web-scale synthetic log of `data` lives: --data_path, else a directory named
    by its settings under $TFRS_LOGQ_CACHE (default ~/.cache/tfrs_logq)."""
    if data.data_path:
        return data.data_path
    # The Zipf exponent names the directory only where it is not 1.0, so that the logs
    # written before --synthetic_zipf keep their names.
    # So does the log's seed where it is not 0.
    zipf = "" if data.synthetic_zipf == 1.0 else f"-zipf{data.synthetic_zipf:g}"
    seed = f"-seed{data.synthetic_log_seed}" if data.synthetic_log_seed else ""
    return os.path.join(
        cache_root(),
        "web_synthetic",
        f"items{data.synthetic_items}-users"
        f"{data.synthetic_users}-days{data.synthetic_days}-events"
        f"{data.synthetic_events_per_user:g}{zipf}{seed}",
    )


def event_columns(data: configs.DataConfig) -> events_lib.EventColumns:
    """The columns (and, for a public log, the rows and time shift) the log of `data` is
    read with."""
    if data.dataset == "web_synthetic":
        return events_lib.EventColumns()
    if data.dataset == "yambda":
        return public_logs.yambda_columns(data.yambda_events, data.yambda_organic, data.day_seconds)
    if data.dataset == "ml-32m":
        return public_logs.ml_32m_columns(data.day_seconds)
    return events_lib.EventColumns(
        data.user_column,
        data.item_column,
        data.time_column,
        data.weight_column,
        time_unit=data.time_unit,
        keep_id_whitespace=data.keep_id_whitespace,
    )


def public_log_files(data: configs.DataConfig) -> List[str]:
    """The files a public log (yambda, ml-32m) of `data` reads, checked (`public_logs`)."""
    if data.dataset == "yambda":
        return public_logs.yambda_files(data.data_path, data.yambda_events)
    return [public_logs.ml_32m_file(data.data_path)]


def event_files(data: configs.DataConfig):
    """The glob of the event log of `data` (the web-scale synthetic log written if missing),
    or a public log's files."""
    if data.dataset in ("yambda", "ml-32m"):
        return public_log_files(data)
    if data.dataset == "web_synthetic":
        return web_synthetic.ensure_log(
            web_synthetic_dir(data),
            data.synthetic_items,
            data.synthetic_users,
            data.synthetic_days,
            data.synthetic_events_per_user,
            seed=data.synthetic_log_seed,
            exponent=data.synthetic_zipf,
        )
    return data.data_path


def _log_setup(
    data: configs.DataConfig, dim: int, run_dir: Optional[str], need_span: bool = False
) -> Tuple[
    List[str],
    events_lib.EventColumns,
    Dict[str, events_lib.Vocabulary],
    Optional[Tuple[int, int]],
]:
    """(files, columns, vocabularies, (first, last) time or None) of an event-log dataset:
    the run's saved vocabularies when `run_dir` holds them, else counted on the training
    days (the days before the validation day with --split=next_day, every day otherwise).
    The time span is read when the count needs it, or with `need_span`."""
    pattern = event_files(data)
    files = events_lib.event_files(pattern)
    columns = event_columns(data)
    vocabulary_dir = RunFiles(run_dir).vocabulary if run_dir else None
    saved = None
    if vocabulary_dir and saved_for(vocabulary_dir, data):
        saved = events_lib.load_vocabularies(vocabulary_dir)
    if saved is None and data.dataset == "events" and data.time_unit == "auto":
        unit = events_lib.numeric_time_unit(files, columns)
        if unit is not None:
            print(
                f"[data] times read as {unit} since 1970 (from the numbers' size; "
                "--time_unit sets the unit).",
                flush=True,
            )
    span, count_before = None, None
    if data.split == "next_day" and (need_span or saved is None):
        span = events_lib.time_span(files, columns)
        if saved is None:
            # A log of too few days is said as such (before its empty training days would
            # be blamed on --min_user_count); counted up to the validation day.
            days = log_days(data, span, files)
            count_before = days.day_start(days.test - 1)
    vocabularies = events_lib.log_vocabularies(
        files,
        columns,
        min_item_count=data.min_item_count,
        min_user_count=data.min_user_count,
        vocabularies=saved,
        count_before=count_before,
        max_entries=events_lib.entries_in_budget(data.max_vocabulary_mb, dim),
        say=lambda line: print(f"[data] {line}", flush=True),
    )
    # The ids' types are decided here, once, before training: the log's (`IdTypes`), the
    # catalog's checked against them, the saved vocabularies and the export following.
    if data.item_catalog and saved is None:
        vocabularies["item"] = _with_catalog(data, vocabularies["item"])
    return files, columns, vocabularies, span


def log_days(
    data: configs.DataConfig, span: Tuple[int, int], files: Optional[List[str]] = None
) -> splits_lib.DayLayout:
    """The next-day protocol's days of an event log whose raw times span `span`
    (`splits.day_layout`: every reader counts the log's days from them)."""
    source = events_lib.source_name(files) if files else (data.data_path or data.dataset)
    layout = splits_lib.day_layout(*span, data.test_day, data.day_seconds, source)
    if data.dataset in ("yambda", "ml-32m") and data.test_day == -1:
        shift = event_columns(data).time_shift
        public_logs.check_test_window(
            data.dataset,
            layout.day_start(layout.test) - shift,
            layout.day_start(layout.test + 1) - shift,
            source,
        )
    return layout


def test_day_end(data: configs.DataConfig, span: Optional[Tuple[int, int]]) -> Optional[int]:
    """The end of a next-day split's test day, in the log's seconds (None without a span):
    the events from it on are never trained or tested on, and counted apart."""
    if span is None or data.split != "next_day":
        return None
    days = log_days(data, span)
    return days.day_start(days.test + 1)


def say_dropped(facts: Dict) -> None:
    """Prints what reading the log dropped and why, each cause its own count (`facts`: an
    event log's read statistics; the same counts go to metrics.json's "event_log")."""
    parts = [
        f"{facts.get(key, 0):,} {what}"
        for key, what in (
            ("events_dropped_duplicate", "duplicates (the same user, item and time)"),
            (
                "events_dropped_out_of_vocabulary",
                "out of the vocabulary (an id under --min_user_count / --min_item_count in "
                "the training days, or first seen after them)",
            ),
            ("events_after_test_day", "after the test day (never used)"),
        )
    ]
    stripped = [
        f"{facts[f'{kind}_ids_stripped']:,} {kind} ids"
        for kind in ("user", "item")
        if facts.get(f"{kind}_ids_stripped")
    ]
    read, kept = facts.get("events_read", 0), facts.get("events_kept", 0)
    line = f"[data] read {read:,} events; kept {kept:,}; dropped {', '.join(parts)}."
    if stripped:
        line += (
            f" Stripped spaces around {' and '.join(stripped)} (--keep_id_whitespace keeps them)."
        )
    print(line, flush=True)


def item_catalog_path(data: configs.DataConfig) -> str:
    """The file --item_catalog names ('log': the web_synthetic log's own, written if
    missing)."""
    if data.item_catalog == "log":
        event_files(data)  # The log (and its catalog) written first if missing.
        return web_synthetic.catalog_file(web_synthetic_dir(data))
    return data.item_catalog


def _with_catalog(data: configs.DataConfig, vocab: events_lib.Vocabulary) -> events_lib.Vocabulary:
    """The item vocabulary extended by the catalog's items (`events.with_catalog`), said."""
    path = item_catalog_path(data)
    column = event_columns(data).item
    catalog = events_lib.read_catalog(
        path, column, keep_whitespace=data.keep_id_whitespace, integer=vocab.integer
    )
    vocab, facts = events_lib.with_catalog(vocab, catalog)
    print(
        f"[data] item catalog {path}: {facts['catalog_items']:,} items, "
        f"{facts['catalog_items_added']:,} of them without a training event (added to the "
        f"item table); {facts['log_items_not_in_catalog']:,} items of the training events "
        "are not in the catalog (kept).",
        flush=True,
    )
    return vocab


@functools.lru_cache(maxsize=2)
def event_log(
    data: configs.DataConfig, dim: int, run_dir: Optional[str] = None
) -> Tuple[events_lib.EventLog, str]:
    """(EventLog, glob) of an event-log dataset read into memory, encoded with the
    vocabularies of `_log_setup`."""
    started = time.time()
    _, columns, vocabularies, span = _log_setup(
        data, dim, run_dir, need_span=data.split == "next_day"
    )
    counted = time.time()
    log = events_lib.load_events(
        event_files(data),
        columns,
        vocabularies=vocabularies,
        count_after=test_day_end(data, span),
    )
    log.stats["seconds_vocabulary"] = round(counted - started, 1)
    if span is not None:  # The raw log's times, which the next-day split counts days from.
        log.stats["first_time"], log.stats["last_time"] = (int(t) for t in span)
    say_dropped(log.stats)
    return log, event_files(data)


def out_of_core(config: configs.Config) -> bool:
    """Whether the run reads its event log out of core (`day_store`): the next-day split
    trained in time order by the two-tower model. Other runs hold the log in memory (a
    shuffled order draws from every example at once)."""
    return (
        config.data.dataset in configs.EVENT_LOGS
        and config.data.split == "next_day"
        and config.model.model == "two_tower"
        and config.training.order == "time"
    )


def day_store_dir(config: configs.Config, run_dir: Optional[str]) -> str:
    """OUTPUT/day_store; without a run, a directory under $TFRS_LOGQ_CACHE named by the
    settings."""
    if run_dir:
        return RunFiles(run_dir).day_store
    # "count": the vocabularies' count (its dense ids); an event logged more than once has
    # counted once since issue 62, so a store cached before holds other dense ids.
    key = json.dumps({**store_settings(config), "count": "distinct events"}, sort_keys=True)
    return os.path.join(cache_root(), "day_store", hashlib.sha256(key.encode()).hexdigest()[:16])


def store_settings(config: configs.Config) -> Dict:
    source = dataclasses.asdict(config.data)
    # A public log's times are shifted onto its published days (`public_logs`): the shift
    # names the store too, where there is one (a store of other day boundaries is not this).
    shift = event_columns(config.data).time_shift
    if shift:
        source["time_shift"] = shift
    return dict(
        history_length=config.model.history_length,
        validation_queries=config.data.validation_queries,
        test_queries=config.training.test_queries,
        day_seconds=config.data.day_seconds,
        test_day=config.data.test_day,
        settings_source=source,
    )


def ensure_day_store(
    config: configs.Config, run_dir: Optional[str] = None, vocabularies_too: bool = False
):
    """(the store's directory, the vocabularies or None) of an `out_of_core` run: its store
    built first where it is not (from the run's saved vocabularies when it has them). A built
    store's log is read again only for `vocabularies_too`."""
    directory = day_store_dir(config, run_dir)
    settings = store_settings(config)
    with day_store.building(directory):
        started = time.time()
        built = day_store.is_built(
            directory, **settings, source_defaults=configs.stored_data_defaults()
        )
        if built and not vocabularies_too:
            return directory, None
        files, columns, vocabularies, span = _log_setup(
            config.data, config.model.dim, run_dir, need_span=not built
        )
        if not built:
            assert span is not None  # An out-of-core run's split is next_day: span was read.
            day_store.build(
                directory,
                events_lib.EncodedBatches(
                    files, columns, vocabularies, count_after=test_day_end(config.data, span)
                ),
                len(vocabularies["user"]),
                len(vocabularies["item"]),
                *span,
                weighted=bool(columns.weight),
                source=config.data.data_path or config.data.dataset,
                stats={"seconds_vocabulary": round(time.time() - started, 1)},
                say=lambda text: print(f"[day store] {text}", flush=True),
                **settings,
            )
            say_dropped(day_store.facts(directory))
    return directory, vocabularies


@functools.lru_cache(maxsize=2)
def day_store_data(config: configs.Config, run_dir: Optional[str] = None):
    """(LogSummary, Split) of an `out_of_core` run: its store read back, or built first
    (`ensure_day_store`)."""
    directory, vocabularies = ensure_day_store(config, run_dir, vocabularies_too=True)
    ids = {
        kind: np.concatenate([[""], vocab.ids]).astype(object)
        for kind, vocab in vocabularies.items()
    }
    return day_store.read(directory, ids["user"], ids["item"])


def save_vocabularies(config: configs.Config, output_dir: str) -> None:
    """Saves an event-log run's vocabularies to OUTPUT/vocabulary (once): what its
    evaluation and export read back instead of the log."""
    if config.data.dataset not in configs.EVENT_LOGS:
        return
    directory = RunFiles(output_dir).vocabulary
    if saved_for(directory, config.data):
        return
    if out_of_core(config):
        data = day_store_data(config, output_dir)[0]
    else:
        data = event_log(config.data, config.model.dim, output_dir)[0].interactions
    events_lib.save_vocabularies(
        directory,
        data,
        event_log_facts(config, output_dir),
        {"source": event_files(config.data), "data": dataclasses.asdict(config.data)},
    )


def event_log_facts(config: configs.Config, run_dir: Optional[str]) -> Dict:
    """An event-log run's read statistics and "integer_ids" (the id columns whose ids are
    all int64), without reading the log again when the run has them."""
    if out_of_core(config):
        return day_store.facts(day_store_dir(config, run_dir))
    log = event_log(config.data, config.model.dim, run_dir)[0]
    return {**log.stats, "integer_ids": list(log.integer_ids)}


def saved_for(directory: str, data: configs.DataConfig) -> bool:
    """Whether `directory` holds vocabularies made with the data settings `data` (a run that
    failed before training and is started again with other settings counts anew)."""
    if not events_lib.has_vocabularies(directory):
        return False
    with open(os.path.join(directory, "vocabulary.json")) as f:
        saved = json.load(f).get("data")
    # Settings added since the run saved them count at their defaults (or at the value the
    # run's log was read with: configs.LEGACY_DATA).
    defaults = configs.stored_data_defaults()
    return saved is not None and {**defaults, **saved} == dataclasses.asdict(data)
