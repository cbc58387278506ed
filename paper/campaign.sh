#!/usr/bin/env bash
# The paper campaign's queue: the official-protocol reproduction after tier 1, on 2 CPU cores.
#
#   bash paper/campaign.sh setup      # the worktree of the campaign's code; unpacks parked runs
#   bash paper/campaign.sh queue      # two drivers, one per core (hours; resumable)
#   bash paper/campaign.sh queue 0    # core 0's driver alone (or 1), to restart one
#   bash paper/campaign.sh watch      # rewrites the reports in this tree as runs finish
#   bash paper/campaign.sh park       # packs the runs in progress into PARK_DIR (before a stop)
#   bash paper/campaign.sh status     # each run in progress: epochs, best, fewest left; its
#                                     # same-seed pairs so far
#   bash paper/campaign.sh per_query  # writes finished runs' per-query metrics
#
# The script commits nothing by itself: where `watch`, `park` or `per_query` write files to be
# kept in git (reports, per-query metrics), each prints the `git add` / `git commit` command that
# would keep them. Given --commit (`watch --commit`), it runs that command instead.
#
# Every run trains with one code: a git worktree at CAMPAIGN_DIR of CAMPAIGN_COMMIT (by default
# this tree's HEAD when `setup` makes the worktree), with this tree's .venv linked into it, so
# that editing this tree never changes a run under way. Two drivers, each pinned to one core
# with one TensorFlow thread and its own scratch results directory (LOG_DIR/scratch_a,
# scratch_b), work down STEPS, each over half of a step's rows. The runner (`paper.reproduce`,
# the worktree's own) skips finished runs and resumes the others from their backups, so running
# `queue` again continues where it stopped. The run directories can be gone (a new machine), so
# `queue` first copies this tree's reports' JSON into the scratch directories, and every call
# passes --include_recorded, so the runs they record count as finished.
#
# A run in progress lives in CAMPAIGN_DIR/runs only, and a paper-scale run takes longer than a
# session. `park` packs each one (paper/park.py: its backup, logs and best weights, about 16 MB
# at `official`) into PARK_DIR, outside the repository ($TFRS_LOGQ_PARK_DIR, by default
# ~/.cache/tfrs_logq/parked; carry that folder to the next machine); `setup` there unpacks them,
# so that `queue` resumes them from their backups. A parked run resumes only with the code
# that trained it: set CAMPAIGN_COMMIT to its commit (the `git_revision` of its config) for
# `setup`. `park` removes the archives of parked runs that have finished.
#
# `watch` writes each report with this tree's `paper.reproduce --report_only` from the
# campaign's runs (and the runs the report in this tree records) when a run has finished.
# Before that it writes each finished run's per-query test metrics (PER_QUERY_DIR, about 30 kB a
# run), which the reports pair by test user, and `pipelines.evaluate --against` too, once the
# run's checkpoint is gone.
# bash reads a script as it runs it: to edit this file while `queue` or `watch` runs, start them
# from a copy, with MAIN_DIR set to this tree.
set -euo pipefail
MAIN_DIR=${MAIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
CAMPAIGN_DIR=$(realpath -m "${CAMPAIGN_DIR:-$MAIN_DIR/../campaign}")
LOG_DIR=$(realpath -m "${LOG_DIR:-$MAIN_DIR/../campaign_logs}")
# One ARCHIVE per run, REPORT/ROW/seedN.tar.gz; the default of paper/park.py's park_dir().
PARK_DIR=$(realpath -m "${TFRS_LOGQ_PARK_DIR:-$HOME/.cache/tfrs_logq/parked}")
RUNS_DIR=$CAMPAIGN_DIR/runs/reproduce
PER_QUERY_DIR=docs/results/per_query  # In MAIN_DIR: REPORT/ROW/seedN.npz per finished run.
COMMIT=0  # 1 with --commit: commit what `watch`, `park` and `per_query` write.

# One step: the runner's flags | core 1's rows | core 0's rows ("-": none). A row stays on one
# core from step to step: `--seeds=N` trains seeds 0 .. N-1 in turn, so the same row
# on both cores would train one seed's directory twice at once.
STEPS=(
  "--profile=official_cpu --split=temporal --temporal_targets=successive --seeds=3|mixed-standard,mixed-improved|mixed-standard_tfrs,full_softmax"
  "--profile=official_cpu --split=loo --seeds=5|in_batch-none,in_batch-standard|in_batch-improved_pool,in_batch-standard_tfrs"
  "--profile=official --split=loo --seeds=1|mixed-standard|mixed-improved"
  "--profile=official_cpu --split=loo --seeds=3|-|mixed-none,uniform,bce,gbce"
  "--profile=official --split=loo --seeds=2|mixed-standard|mixed-improved"
  "--profile=official_cpu --split=temporal --temporal_targets=first --seeds=3|mixed-standard,mixed-improved|mixed-standard_tfrs,full_softmax"
)
# The reports `watch` keeps: the file's name | the runner's flags. The rows named are listed even
# before they run ("not run"); the finished runs of any other row join the report as they come.
TIER1=mixed-standard,mixed-improved,mixed-standard_tfrs,full_softmax
TIER2=in_batch-none,in_batch-standard,in_batch-improved_pool,in_batch-standard_tfrs
REPORTS=(
  "ml1m_loo_official_cpu|--profile=official_cpu --split=loo --seeds=5 --rows=$TIER1,$TIER2"
  "ml1m_temporal_successive_official_cpu|--profile=official_cpu --split=temporal --temporal_targets=successive --seeds=3 --rows=$TIER1"
  "ml1m_temporal_official_cpu|--profile=official_cpu --split=temporal --seeds=3 --rows=$TIER1"
  "ml1m_loo_official|--profile=official --split=loo --seeds=2 --rows=mixed-standard,mixed-improved"
)

setup() {
  if [ ! -d "$CAMPAIGN_DIR" ]; then
    git -C "$MAIN_DIR" worktree add --detach "$CAMPAIGN_DIR" \
      "${CAMPAIGN_COMMIT:-$(git -C "$MAIN_DIR" rev-parse HEAD)}"
  fi
  [ -e "$CAMPAIGN_DIR/.venv" ] || ln -s "$MAIN_DIR/.venv" "$CAMPAIGN_DIR/.venv"
  shopt -s nullglob
  local archive run
  for archive in "$PARK_DIR"/*/*/seed*.tar.gz; do
    run=$RUNS_DIR/${archive#"$PARK_DIR/"}
    run=${run%.tar.gz}
    if [ -e "$run" ]; then
      echo "$run exists (this machine ran it): not unpacking $archive"
    elif is_recorded "${archive#"$PARK_DIR/"}"; then
      echo "the report records ${run#"$RUNS_DIR/"}: not unpacking $archive"
    else
      mkdir -p "$(dirname "$run")"
      park_py unpack "$archive" "$run"
    fi
  done
  echo "campaign code: $(git -C "$CAMPAIGN_DIR" rev-parse --short HEAD) in $CAMPAIGN_DIR; logs in $LOG_DIR; parked runs in $PARK_DIR"
}

is_recorded() {  # $1 REPORT/ROW/seedN[.tar.gz]: whether this tree's report of REPORT records it.
  (cd "$MAIN_DIR" && .venv/bin/python -c '
import sys
from paper.plan import row_key
from paper.records import load_recorded
report, row, seed = sys.argv[1].removesuffix(".tar.gz").split("/")
recorded = load_recorded(f"docs/results/{report}.json")
sys.exit(0 if any(row_key(r, f) == row and f"seed{s}" == seed for r, f, s in recorded) else 1)
' "$1")
}

park_py() {  # park.py from this tree, with the campaign's code first on the import path: the
  # best weights are rebuilt by the code that trains them.
  (cd "$CAMPAIGN_DIR" && PYTHONPATH=$CAMPAIGN_DIR TF_CPP_MIN_LOG_LEVEL=2 \
    .venv/bin/python "$MAIN_DIR/paper/park.py" "$@")
}

runner() {  # The worktree's runner: paper.reproduce, or where the worktree is older than paper/,
  # the module it had.
  if [ -e "$CAMPAIGN_DIR/paper/reproduce.py" ]; then
    echo paper.reproduce
  else
    echo benchmarks.reproduce
  fi
}

park() {  # Packs the runs in progress into PARK_DIR; removes the archives of parked runs that
  # have finished (after writing their per-query metrics).
  shopt -s nullglob
  local run archive name parked=0 removed=0
  per_query
  for run in "$RUNS_DIR"/*/*/seed*; do
    name=${run#"$RUNS_DIR/"}
    archive=$PARK_DIR/$name.tar.gz
    if [ -e "$run/metrics.json" ] || is_recorded "$name"; then
      if [ -e "$archive" ]; then
        rm "$archive"
        removed=$((removed + 1))
        echo "finished: $name (its archive removed)"
      fi
    elif [ -e "$run/config.json" ] && [ -d "$run/backup" ]; then
      if park_py pack "$run" "$archive"; then
        parked=$((parked + 1))
        echo "parked: $name $(tar -xzOf "$archive" "${run##*/}/progress.json" 2>/dev/null || true)"
      else
        echo "$(date) park: packing $name failed; it stays in $run only"
      fi
    fi
  done
  echo "$(date) park: $parked runs in progress parked in $PARK_DIR, $removed finished removed"
}

run() {  # $1 core, $2 scratch name, then the runner's flags
  local core=$1 scratch=$2 status=0
  shift 2
  echo "$(date) core $core: $*"
  (cd "$CAMPAIGN_DIR" && TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 taskset -c "$core" \
    .venv/bin/python -m "$(runner)" --results_dir="$LOG_DIR/scratch_$scratch" \
    --include_recorded "$@" >> "$LOG_DIR/queue_$scratch.log" 2>&1) || status=$?
  echo "$(date) core $core: rc=$status"
}

drive() {  # $1 core, $2 scratch name, $3 the field of STEPS that holds this core's rows
  local step flags rows
  for step in "${STEPS[@]}"; do
    flags=${step%%|*}
    rows=$(echo "$step" | cut -d'|' -f"$3")
    [ "$rows" = - ] && continue  # Not `--rows=`, which the runner reads as every row.
    # shellcheck disable=SC2086
    run "$1" "$2" $flags --rows="$rows"
  done
}

sync_scratch() {  # $@ scratch names: each driver's results directory gets this tree's reports.
  # A driver rewrites its report with the rows of its own step only (the runner's --rows), so a
  # scratch copy loses the other core's rows after each step; refreshed from this tree's
  # reports (`watch` keeps them whole) before a driver starts, a restarted driver sees every
  # recorded run as finished instead of training it again.
  shopt -s nullglob
  local scratch report
  for scratch in "$@"; do
    mkdir -p "$LOG_DIR/scratch_$scratch"
    for report in "$MAIN_DIR"/docs/results/ml1m_*official*.json; do
      cp "$report" "$LOG_DIR/scratch_$scratch/"
    done
  done
}

core_driver() {  # $1 core: core 1 has scratch a and STEPS' field 2, core 0 scratch b and field 3.
  local scratch=b field=3
  [ "$1" = 1 ] && scratch=a field=2
  sync_scratch "$scratch"
  drive "$1" "$scratch" "$field"
}

queue() {  # $1 (optional): 0 or 1, to restart one core's driver alone.
  [ -d "$CAMPAIGN_DIR" ] || { echo "no $CAMPAIGN_DIR: run '$0 setup' first" >&2; exit 1; }
  case ${1:-both} in
    0|1) core_driver "$1" ;;
    both) core_driver 1 & core_driver 0 & wait ;;
    *) echo "queue takes 0, 1 or nothing (both cores); received $1" >&2; exit 2 ;;
  esac
}

watch() {
  declare -A last
  local entry name flags n
  while true; do
    per_query  # First, so that the report rewritten for a finished run pairs it by user.
    for entry in "${REPORTS[@]}"; do
      name=${entry%%|*} flags=${entry#*|}
      n=$(find "$RUNS_DIR/$name" -name metrics.json 2>/dev/null | wc -l || true)
      if [ "$n" -gt 0 ] && { [ "$n" != "${last[$name]:-}" ] || [ "$PER_QUERY_ADDED" -gt 0 ]; }; then
        # shellcheck disable=SC2086
        if (cd "$MAIN_DIR" && timeout 600 .venv/bin/python -m paper.reproduce \
              $flags --include_recorded --report_only \
              --output_dir="$RUNS_DIR" > "$LOG_DIR/report_$name.log" 2>&1); then
          keep "$name" "$n"
        else
          echo "$(date) report $name failed: $LOG_DIR/report_$name.log"
        fi
        last[$name]=$n
      fi
    done
    sleep 120
  done
}

keep() {  # $1 report name, $2 finished runs in the campaign's directory
  cd "$MAIN_DIR"
  if [ -z "$(git status --porcelain -- docs/results/"$1".*)" ]; then
    echo "$(date) $1 unchanged ($2 runs)"
    return
  fi
  commit_paths "results: $1, $2 runs of the campaign finished (report from the runs of the campaign worktree at $(git -C "$CAMPAIGN_DIR" rev-parse --short HEAD))" docs/results/"$1".*
}

commit_paths() {  # $1 message, then the paths (in MAIN_DIR) to keep: with --commit, adds and
  # commits them; else prints the command that would.
  local message=$1 try
  shift
  if [ "$COMMIT" != 1 ]; then
    echo "$(date) to keep them in git:$(printf ' %q' git -C "$MAIN_DIR" add -- "$@") &&$(printf ' %q' git -C "$MAIN_DIR" commit -m "$message" -- "$@")"
    return
  fi
  for try in 1 2 3 4 5; do  # another commit may hold the index lock for a moment
    if git -C "$MAIN_DIR" add -- "$@" && git -C "$MAIN_DIR" commit -q -m "$message" -- "$@"; then
      echo "$(date) committed: $message"
      return
    fi
    sleep 20
  done
  echo "$(date) could not commit: $message" >&2
}

per_query() {  # Each finished run's per-query test metrics (`pipelines.evaluate --per_query_out`),
  # so that the reports and `evaluate --against` pair runs user by user after their checkpoints go.
  shopt -s nullglob
  local metrics run name out added=()
  PER_QUERY_ADDED=0
  cd "$MAIN_DIR"
  for metrics in "$RUNS_DIR"/*/*/seed*/metrics.json; do
    run=${metrics%/metrics.json}
    name=${run#"$RUNS_DIR/"}
    out=$PER_QUERY_DIR/$name.npz
    [ -e "$out" ] && continue
    if TF_CPP_MIN_LOG_LEVEL=2 timeout 900 .venv/bin/python -m pipelines.evaluate "$run" \
         --per_query_out="$out" >> "$LOG_DIR/per_query.log" 2>&1; then
      added+=("$out")
    else
      echo "$(date) per-query metrics of $name failed: $LOG_DIR/per_query.log"
    fi
  done
  PER_QUERY_ADDED=${#added[@]}
  if [ ${#added[@]} -gt 0 ]; then
    commit_paths "results: per-query test metrics of ${#added[@]} finished campaign runs" "${added[@]}"
  fi
}

status() {  # Each run in progress (epochs, best, fewest left), then its same-seed pairs so far.
  cd "$MAIN_DIR" && TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python -m paper.campaign_status "$RUNS_DIR"
}

usage() {
  echo "usage: $0 setup | queue [0|1] | watch [--commit] | park [--commit] | status | per_query [--commit] (MAIN_DIR, CAMPAIGN_DIR, CAMPAIGN_COMMIT, LOG_DIR and TFRS_LOGQ_PARK_DIR override the defaults)" >&2
  exit 2
}

args=()
for arg in "$@"; do
  if [ "$arg" = --commit ]; then COMMIT=1; else args+=("$arg"); fi
done
set -- ${args[@]+"${args[@]}"}
case "${1:-}" in
  watch|park|per_query) ;;
  *) [ "$COMMIT" = 0 ] || usage ;;
esac
case "${1:-}" in
  setup) setup ;;
  queue) queue "${2:-both}" ;;
  watch) watch ;;
  park) park ;;
  status) status ;;
  per_query) per_query ;;
  *) usage ;;
esac
