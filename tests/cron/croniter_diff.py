# SPDX-License-Identifier: MIT
"""Differential test of chime's cron evaluator against croniter.

Usage: /usr/bin/python3 croniter_diff.py <cron_driver> [expressions [seed]]

Generates random valid cron expressions and start instants (fixed seed),
asks chime (through the C driver) for the next N fire times in UTC and in
America/New_York, Europe/Berlin and Australia/Lord_Howe, and checks every
step against Debian's croniter: step i asks croniter for the next fire
time after chime's step i-1 (so one disagreement does not cascade).

Documented deliberate differences (docs/calendar.md, "Differences from
croniter"):
  D1 day fields: chime counts a day field as unrestricted when its text
     begins with '*' (Vixie cron, cronie); croniter when its set of values
     is full. The expression is translated for croniter so that it asks the
     same question (day_or=False, or both day fields '*').
  D2 DST: croniter maps a skipped local time with the offset before the
     gap, runs repeated times once even for hour-wildcard expressions, and
     shifts fire times by the DST difference after crossing a transition.
     A disagreement near a UT offset change is accepted only if an
     independent model of chime's documented DST rules (rule_next() below,
     zoneinfo's fold) gives chime's answer.
  D3 croniter ignores 7 (Sunday) in the day-of-week field of 6-field
     expressions (its 7 -> 0 mapping is skipped there): such expressions
     are not generated.
  D4 croniter overruns a month shorter than a listed day of month
     (from Feb 20 with days {1, 16, 31} it jumps 11 days to Mar 2 and
     misses Mar 1).
  D5 croniter raises CroniterBadDateError for an OR of the day fields
     whose day-of-month half never occurs ('* * 31 2 MON').
D4 and D5 are croniter bugs; D2 to D5 are accepted only where the model
of chime's rules below agrees with chime. Any other disagreement fails the
test. Exit 77: croniter is missing.
"""
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

try:
    from croniter import croniter
    from zoneinfo import ZoneInfo
except ImportError as e:  # pragma: no cover
    print(f"croniter_diff: SKIPPED: {sys.executable} lacks croniter "
          f"({e}); install python3-croniter (scripts/deps.sh)")
    sys.exit(77)

ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]
STEPS = 5
INSTANTS = 2  # start instants per expression and zone

RANGES = {"sec": (0, 59), "min": (0, 59), "hour": (0, 23), "dom": (1, 31),
          "mon": (1, 12), "dow": (0, 7)}
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP",
          "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
          "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}


def gen_value(rng, f, lo, hi, names_ok):
    v = rng.randint(lo, hi)
    if f == "hour" and rng.random() < 0.5:
        v = rng.randint(0, 3)  # near the DST transitions
    if names_ok and f == "mon" and rng.random() < 0.3:
        return v, MONTHS[v - 1].lower() if rng.random() < 0.3 else MONTHS[v - 1]
    if names_ok and f == "dow" and v < 7 and rng.random() < 0.3:
        return v, DAYS[v].capitalize() if rng.random() < 0.3 else DAYS[v]
    return v, str(v)


def gen_element(rng, f, six):
    lo, hi = RANGES[f]
    if f == "dow" and six:
        hi = 6  # D3
    size = RANGES[f][1] - RANGES[f][0] + 1
    k = rng.random()
    if k < 0.25:
        return "*"
    if k < 0.40:
        return "*/%d" % rng.randint(1, min(size, 15))
    if k < 0.65:
        return gen_value(rng, f, lo, hi, True)[1]
    a, at = gen_value(rng, f, lo, hi, True)
    b, bt = gen_value(rng, f, lo, hi, True)
    if a > b:
        a, at, b, bt = b, bt, a, at
    if k < 0.82:
        return "%s-%s" % (at, bt)
    if k < 0.93:
        return "%s-%s/%d" % (at, bt, rng.randint(1, min(size, 10)))
    if f == "dow" and six:
        return "%s-%s" % (at, bt)  # a/s would reach 7 (D3)
    return "%d/%d" % (a, rng.randint(1, min(size, 10)))


def gen_field(rng, f, six):
    if rng.random() < 0.35:
        return "*"
    n = 1 if rng.random() < 0.7 else rng.randint(2, 3)
    elems = [gen_element(rng, f, six) for _ in range(n)]
    if n > 1:
        elems = [e for e in elems if e != "*"] or ["1" if f != "dow" else "1"]
    return ",".join(elems)


def gen_expr(rng):
    if rng.random() < 0.04:
        m = rng.choice(sorted(MACROS))
        return m.upper() if rng.random() < 0.2 else m
    six = rng.random() < 0.2
    fields = ["min", "hour", "dom", "mon", "dow"]
    if six:
        fields = ["sec"] + fields
    return " ".join(gen_field(rng, f, six) for f in fields)


def split(expr):
    """chime's fields: (sec or None, min, hour, dom, mon, dow)."""
    text = MACROS.get(expr.lower(), expr)
    p = text.split()
    return ([None] + p) if len(p) == 5 else p


def croniter_form(expr):
    """The expression as croniter reads it, its day_or, and the D1 class:
    "" (croniter asks the same question as is), "and" (day_or=False was
    needed: a '*'-led day field that croniter counts as restricted) or
    "full" (both restricted for chime, one full for croniter)."""
    sec, mi, hr, dom, mon, dow = split(expr)
    rest = [mi, hr, dom, mon, dow] + ([sec] if sec is not None else [])
    exp = croniter.expand(" ".join(rest))[0]
    croniter_or = exp[2] != ["*"] and exp[4] != ["*"]
    if dom.startswith("*") or dow.startswith("*"):
        return " ".join(rest), False, "and" if croniter_or else ""
    if not croniter_or:
        rest[2] = rest[4] = "*"  # OR with a full field: every day
        return " ".join(rest), True, "full"
    return " ".join(rest), True, ""


# ---- an independent model of chime's documented rules (D2 checks) ---------

def field_set(expanded, lo, hi):
    return set(range(lo, hi + 1)) if expanded == ["*"] else \
        set(int(v) for v in expanded)


class Model:
    def __init__(self, expr, zone):
        sec, mi, hr, dom, mon, dow = split(expr)
        rest = [mi, hr, dom, mon, dow] + ([sec] if sec is not None else [])
        e = croniter.expand(" ".join(rest))[0]
        self.mins = field_set(e[0], 0, 59)
        self.hours = field_set(e[1], 0, 23)
        self.doms = field_set(e[2], 1, 31)
        self.mons = field_set(e[3], 1, 12)
        self.dows = set(v % 7 for v in field_set(e[4], 0, 6))
        self.secs = field_set(e[5], 0, 59) if sec is not None else {0}
        self.day_and = dom.startswith("*") or dow.startswith("*")
        self.wild = hr.startswith("*")
        self.z = zone

    def day_ok(self, d):
        a = d.day in self.doms
        b = (d.isoweekday() % 7) in self.dows
        return (a and b) if self.day_and else (a or b)

    def civil_times(self, start):
        """Matching naive civil datetimes >= start, ascending."""
        d = datetime(start.year, start.month, start.day)
        while True:
            if d.month in self.mons and self.day_ok(d):
                for h in sorted(self.hours):
                    for m in sorted(self.mins):
                        for s in sorted(self.secs):
                            t = d.replace(hour=h, minute=m, second=s)
                            if t >= start:
                                yield t
            d += timedelta(days=1)

    def instants(self, civil):
        """chime's fire instants for one matching civil time."""
        first = civil.replace(tzinfo=self.z, fold=0)
        second = civil.replace(tzinfo=self.z, fold=1)
        i0, i1 = int(first.timestamp()), int(second.timestamp())
        back = datetime.fromtimestamp(i0, self.z).replace(tzinfo=None)
        if back == civil and i0 == i1:
            return [i0]
        if back == civil:  # repeated: fold 0 is the first
            return [i0, i1] if self.wild else [i0]
        if self.wild:  # skipped: a period skips it
            return []
        lo, hi = min(i0, i1), max(i0, i1)  # the change lies in (lo, hi]
        off = datetime.fromtimestamp(lo, self.z).utcoffset()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if datetime.fromtimestamp(mid, self.z).utcoffset() == off:
                lo = mid
            else:
                hi = mid
        return [hi]  # the first instant after the gap

    def next(self, after):
        """The first fire instant > after: scans the matching civil times
        whose instants can lie between after and the best found so far."""
        lo, hi = offset_range(self.z)
        epoch = datetime(1970, 1, 1)
        start = epoch + timedelta(seconds=after + lo + 1)
        best = None
        for civil in self.civil_times(start):
            if best is not None and \
                    (civil - epoch).total_seconds() - hi > best:
                return best
            for i in self.instants(civil):
                if i > after and (best is None or i < best):
                    best = i


_offset_ranges = {}


def offset_range(zone):
    """The least and greatest UT offsets (s) of a zone in 1970-2100."""
    if zone.key not in _offset_ranges:
        t = int(datetime(1970, 1, 1, tzinfo=timezone.utc).timestamp())
        offs = {datetime.fromtimestamp(t, zone).utcoffset()}
        for y in range(1970, 2101):
            for tr in transitions(zone, y):
                offs.add(datetime.fromtimestamp(tr, zone).utcoffset())
        secs = [int(o.total_seconds()) for o in offs]
        _offset_ranges[zone.key] = (min(secs), max(secs))
    return _offset_ranges[zone.key]


def offset_changes(zone, a, b):
    """Does the UT offset change between instants a and b?"""
    ya = datetime.fromtimestamp(a, timezone.utc).year
    yb = datetime.fromtimestamp(b, timezone.utc).year
    return any(a < tr <= b for y in range(ya, yb + 1)
               for tr in transitions(zone, y))


def classify(e, zn, z, model, prev, c, r):
    """The documented difference that explains croniter's r where chime
    (and the model of its rules) gave c, or None."""
    if isinstance(r, int) and zn != "UTC" and \
            offset_changes(z, prev - 93600, max(c, r) + 93600):
        civ = datetime.fromtimestamp(c, z)
        if civ.fold == 1:
            return "D2 repeat"
        if datetime.fromtimestamp(c - 1, z).utcoffset() < civ.utcoffset():
            return "D2 gap"
        return "D2 shift"
    p = datetime.fromtimestamp(prev, z)
    q = datetime.fromtimestamp(c, z)
    last = (q.replace(day=1) - timedelta(days=1)).day
    if isinstance(r, int) and r > c and max(model.doms) > last and \
            (p.year, p.month) < (q.year, q.month) and q.day < max(model.doms):
        return "D4 overrun"
    if not isinstance(r, int) and not model.day_and and \
            not any(d <= [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][m - 1]
                    for m in model.mons for d in model.doms):
        return "D5 raises"
    return None


# ---- start instants ---------------------------------------------------------

_transitions = {}


def transitions(zone, year):
    key = (zone.key, year)
    if key not in _transitions:
        out = []
        t = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp())
        end = int(datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp())
        prev = datetime.fromtimestamp(t, zone).utcoffset()
        while t < end:
            o = datetime.fromtimestamp(t + 86400, zone).utcoffset()
            if o != prev:
                lo, hi = t, t + 86400
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if datetime.fromtimestamp(mid, zone).utcoffset() == prev:
                        lo = mid
                    else:
                        hi = mid
                out.append(hi)
                prev = o
            t += 86400
        _transitions[key] = out
    return _transitions[key]


def gen_start(rng, zname, zone):
    year = rng.randint(1971, 2099)
    if zname != "UTC" and rng.random() < 0.6:
        tr = transitions(zone, year)
        if tr:
            return rng.choice(tr) + rng.randint(-30 * 3600, 2 * 3600)
    lo = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp())
    return lo + rng.randint(0, 365 * 86400)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    driver = sys.argv[1]
    nexpr = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 20240613
    rng = random.Random(seed)
    t0 = time.monotonic()
    zones = {z: ZoneInfo(z) for z in ZONES}

    exprs = [gen_expr(rng) for _ in range(nexpr)]
    cases = []
    for e in exprs:
        for zn in ZONES:
            for _ in range(INSTANTS):
                cases.append((e, zn, gen_start(rng, zn, zones[zn])))
    stdin = "".join("%s %d %d %s\n" % (zn, STEPS, s, e) for e, zn, s in cases)
    res = subprocess.run([driver], input=stdin, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert len(res) == len(cases), (len(res), len(cases))

    stats = {"cases": 0, "steps": 0, "never": 0, "D1 and": 0, "D1 full": 0,
             "D2 gap": 0, "D2 repeat": 0, "D2 shift": 0, "D4 overrun": 0,
             "D5 raises": 0}
    bad = []
    exprs_seen = set()
    for (e, zn, start), line in zip(cases, res):
        if line.startswith("ERR"):
            # Only "never fires" may refuse a generated expression.
            if "never fires" not in line:
                bad.append("%r: chime refused: %s" % (e, line))
            else:
                stats["never"] += 1
            continue
        fires = [int(x) for x in line.split()[1:]]
        if len(fires) != STEPS:
            bad.append("%r %s %d: %d fire times" % (e, zn, start, len(fires)))
            continue
        cexpr, day_or, d1 = croniter_form(e)
        z = zones[zn]
        it = croniter(cexpr, datetime.fromtimestamp(start, z), day_or=day_or)
        stats["cases"] += 1
        exprs_seen.add(e)
        if d1:
            stats["D1 " + d1] += 1
        prev = start
        model = None
        for c in fires:
            stats["steps"] += 1
            try:
                r = int(it.get_next(float, datetime.fromtimestamp(prev, z)))
            except Exception as ex:  # CroniterBadDateError and the like
                r = "croniter: %s" % ex
            if r != c:
                model = model or Model(e, z)
                want = model.next(prev)
                why = classify(e, zn, z, model, prev, c, r) \
                    if want == c else None
                if why:
                    stats[why] += 1
                    prev = c
                    continue
                bad.append("%r in %s after %d: chime %d (%s), croniter %s "
                           "(%s), model of chime's rules %s"
                           % (e, zn, prev, c, datetime.fromtimestamp(c, z),
                              r, datetime.fromtimestamp(r, z)
                              if isinstance(r, int) else "-", want))
                break
            prev = c

    dt = time.monotonic() - t0
    print("croniter_diff: seed %d, %d expressions (%d distinct compared) x "
          "%d zones x %d instants = %d cases, %d steps of %d fire times "
          "compared in %.1f s" % (seed, nexpr, len(exprs_seen), len(ZONES),
                                  INSTANTS, stats["cases"], stats["steps"],
                                  STEPS, dt))
    print("  refused as never firing: %d cases" % stats["never"])
    print("  D1 (day-field rule, translated for croniter): %d cases with a "
          "'*'-led day field beside a restricted one, %d with a full one"
          % (stats["D1 and"], stats["D1 full"]))
    print("  D2 (DST, checked against the model of chime's rules): %d gap, "
          "%d repeated-time, %d croniter-shift steps"
          % (stats["D2 gap"], stats["D2 repeat"], stats["D2 shift"]))
    print("  D4 (croniter overruns a month shorter than a listed day): %d "
          "steps" % stats["D4 overrun"])
    print("  D5 (croniter raises on an OR whose day-of-month half never "
          "occurs): %d steps" % stats["D5 raises"])
    print("  disagreements not documented: %d" % len(bad))
    for b in bad[:30]:
        print("    " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
