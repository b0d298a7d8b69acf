"""Issue 9's goals as the simulator's `--json` reports them: which goals a budget run
misses against the static and decayed fair-share baselines of the same scenario and seed.

Owns: the goal letters (S U M T L P X) and the small readers they need. Shared by
scripts/sim-results (the tables of docs/simulator-results.md) and scripts/sim-goals
(side-by-side comparison of `--rule` variants or throw-away builds), so that a figure
in the doc and a figure measured in a session count the same thing.
"""

# Letter -> what it means (the legend both scripts print).
LEGEND = {
    "S": "shortfall > 5% or above a baseline",
    "U": "utilisation below static's",
    "M": "makespan above decay x 1.02",
    "T": "a team's mean shortfall > 5%",
    "L": "late team's worst window > 10%",
    "P": "more than 0.05 preemptions per GPU-day",
    "X": "more than 2% of the work lost",
}


def teams(r):
    """The teams that were entitled to something (the others cannot fall short)."""
    return [t for t in r["teams"] if t["entitled_gpus"] > 0]


def team_max(r):
    """The worst team's mean entitlement shortfall over windows."""
    return max(t["entitlement_shortfall_mean"] for t in teams(r))


def worst(r):
    """The worst single window of any team."""
    return max(t["entitlement_shortfall_worst"] for t in teams(r))


# Scenarios whose team `l` arrives late to a full cluster: the L goal's shapes.
LATE_SHAPES = ("late-arrival", "late-whole-node", "late-whole-node-b", "late-wide",
               "late-wide-b", "over-holds", "over-holds-b")


def late_team(r):
    """Team `l` of the late-arrival shapes (arrives on day 7, or 10)."""
    return next(t for t in r["teams"] if t["team"] == "l")


def misses(sc, b, s, dc):
    """Goals of issue 9 the budget run `b` misses, as a string of letters (LEGEND),
    against the static run `s` and the decay run `dc` of scenario `sc`, same seed."""
    out = ""
    best = min(s["entitlement_shortfall"], dc["entitlement_shortfall"])
    if b["entitlement_shortfall"] > 0.05 or b["entitlement_shortfall"] > best:
        out += "S"
    if b["utilization"] < s["utilization"]:
        out += "U"
    if b["makespan_days"] > 1.02 * dc["makespan_days"]:
        out += "M"
    if team_max(b) > 0.05:
        out += "T"
    if sc in LATE_SHAPES and late_team(b)["entitlement_shortfall_worst"] > 0.10:
        out += "L"
    if b["preemptions_per_gpu_day"] > 0.05:
        out += "P"
    if b["lost_fraction_of_work"] > 0.02:
        out += "X"
    return out
