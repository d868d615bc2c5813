#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Draws the benchmark figures with gnuplot (Debian's gnuplot-nox).
#
# Usage: bash bench/plots.sh RESULTS_DIR PLOT_DIR MAIN_W2_L
#   PLOT_DIR/bench-w3-lateness.png  W3 lateness: CDF (log x) and its tail
#       (1 - CDF, log-log) for chime, Java STPE, the machine's timer
#       floor, and the timer-slack diagnostics; for each system the run
#       with the median p99 is drawn.
#   PLOT_DIR/bench-w2-scaling.png   W2 cost per round (ns, cancel +
#       schedule or re-arm) against the live-set size, every system.
#   PLOT_DIR/bench-w7-scaling.png   W7 total timer operations per second
#       against the number of loop threads K, every system, each with a
#       dotted line at K times its K=1 figure (linear scaling).
set -euo pipefail
res=$1
dir=$2
mkdir -p "$dir"

# ---- W3 -----------------------------------------------------------------------
if [ -s "$res/w3-median-runs.txt" ]; then
    plots=()
    while read -r sys run; do
        f="$res/w3-$sys-$run.cdf"
        [ -s "$f" ] || continue
        case "$sys" in
        chime) style="lw 2.5 lc rgb '#d62728'" ;;
        stpe) style="lw 2.5 lc rgb '#1f77b4'" ;;
        stpe-slack) style="lw 1.5 dt 2 lc rgb '#17becf'" ;;
        chime-slack) style="lw 1.5 dt 2 lc rgb '#ff7f0e'" ;;
        os-floor) style="lw 1.5 dt 2 lc rgb '#555555'" ;;
        *) style="lw 1.5 dt 3 lc rgb '#999999'" ;;
        esac
        plots+=("'$f' using 1:COL with lines $style title '$sys (run $run)'")
    done < <(sort "$res/w3-median-runs.txt")
    if [ ${#plots[@]} -gt 0 ]; then
        cdf=$(IFS=,; echo "${plots[*]}")
        cdf=${cdf//COL/2}
        tail=${cdf//1:2/1:(1-\$2 > 0 ? 1-\$2 : 1/0)}
        gnuplot <<EOF
set terminal pngcairo size 1200,480 font ',10'
set output '$dir/bench-w3-lateness.png'
set multiplot layout 1,2 title 'W3: lateness of 100,000 runs/s (1,000 fixed-rate tasks, 10 ms period), 5 s measured'
set logscale x
set xrange [1:100000]
set xlabel 'lateness (µs, log scale)'
set grid
set key bottom right
set ylabel 'fraction of runs with lateness <= x (CDF)'
set yrange [0:1]
plot $cdf
set logscale y
set yrange [1e-5:1]
set key top right
set ylabel 'fraction of runs later than x (1 - CDF, log scale)'
plot $tail
unset multiplot
EOF
        echo "plots.sh: $dir/bench-w3-lateness.png"
    fi
fi

# ---- W2 scaling -----------------------------------------------------------------
dat="$res/w2-scaling-ns_per_round.dat"
if [ -s "$dat" ] && [ "$(wc -l <"$dat")" -gt 2 ]; then
    ncol=$(head -1 "$dat" | wc -w)
    gnuplot <<EOF
set terminal pngcairo size 900,560 font ',10'
set output '$dir/bench-w2-scaling.png'
set title 'W2 timeout churn: cost per round against live-set size (median of runs)'
set datafile missing '?'
set logscale x
set logscale y
set xlabel 'live set L (pending timers, log scale)'
set ylabel 'ns per round (cancel + schedule, or re-arm; log scale)'
set grid
set key outside right
set xtics ('1k' 1000, '10k' 10000, '100k' 100000, '1M' 1000000)
set xrange [700:1400000]
# gnuplot has 8 colours: the 9th system on is dashed, with other points.
plot for [i=2:$ncol] '$dat' using 1:i with linespoints lw 2 lt ((i-2)%8+1) dt i/10+1 pt (i < 10 ? 7 : 5) title columnhead(i)
EOF
    echo "plots.sh: $dir/bench-w2-scaling.png"
fi

# ---- W7 scaling -----------------------------------------------------------------
dat="$res/w7-scaling.dat"
if [ -s "$dat" ] && [ "$(wc -l <"$dat")" -gt 2 ]; then
    ncol=$(head -1 "$dat" | wc -w)
    kmax=$(awk 'NR > 1 { k = $1 } END { print k }' "$dat")
    gnuplot <<EOF
set terminal pngcairo size 900,560 font ',10'
set output '$dir/bench-w7-scaling.png'
set title "W7 multi-reactor scaling: timer operations done on K loop threads (median of runs)"
set datafile missing '?'
set key autotitle columnhead
set xlabel 'loop threads K (each with its own event_base and timers; one shared chime pool)' noenhanced
set ylabel 'total operations per second (millions)'
set grid
set key outside right
set xrange [0.8:$kmax + 0.2]
set xtics 1
set yrange [0:*]
# K=1 figure of each system: the dotted line is K times it (linear scaling).
array y1[$ncol]
do for [i=2:$ncol] {
    stats '$dat' using i every ::0::0 nooutput
    y1[i] = STATS_max
}
plot for [i=2:$ncol] '$dat' using 1:(column(i) / 1e6) with linespoints lw 2 pt 7 lc i, \
     for [i=2:$ncol] '$dat' using 1:(\$1 * y1[i] / 1e6) with lines dt 3 lc i notitle
EOF
    echo "plots.sh: $dir/bench-w7-scaling.png"
fi
