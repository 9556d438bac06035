//! Scenario-level results: the per-run summaries combined into the papers' metrics, written
//! as `summary-<mode>.csv`, `summary-<mode>.json` and charts (PNG and SVG).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::control_lag::AckLag;
use super::metrics;
use super::plan::{Kind, Plan, RunSpec};
use super::plot::{self, Chart, Series};
use super::runner::{self, RunSummary, Status};

/// The primary-versus-competitor metrics of one bottleneck.
#[derive(Debug, Clone, Serialize)]
pub struct PairPoint {
    /// Run id of the competing run.
    pub run: String,
    /// Primary throughput with / alone.
    pub ratio: f64,
    /// Joint utilization with the competitor.
    pub utilization: Option<f64>,
    /// Harm to the primary's throughput and to its p95 RTT (Ware et al.).
    pub harm_throughput: Option<f64>,
    pub harm_rtt_p95: Option<f64>,
    /// Primary p95 RTT with / alone: harm counts no decrease, and B8 claims one (BBR's RTT
    /// lower beside Proteus-S).
    pub rtt_p95_ratio: Option<f64>,
}

/// Aggregates of one primary/competitor pair.
#[derive(Debug, Clone, Serialize)]
pub struct PairSummary {
    pub points: Vec<PairPoint>,
    pub median_ratio: Option<f64>,
    /// Fraction of bottlenecks where the primary kept at most 80% (ANRW's "cut by >= 20%").
    pub fraction_ratio_at_most_0_8: Option<f64>,
    pub median_utilization: Option<f64>,
    pub mean_harm_throughput: Option<f64>,
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The same bottleneck and the same repetition of it.
fn same_bottleneck(a: &RunSummary, b: &RunSummary) -> bool {
    let (a, b) = (&a.spec, &b.spec);
    a.bottleneck() == b.bottleneck() && a.repeat == b.repeat
}

/// Pairs each competing run with the primary's alone run on the same bottleneck.
pub fn pairs(runs: &[RunSummary]) -> BTreeMap<String, PairSummary> {
    let ok: Vec<&RunSummary> = runs.iter().filter(|r| r.status == Status::Ok).collect();
    let mut points: BTreeMap<String, Vec<PairPoint>> = BTreeMap::new();
    for with in ok.iter().filter(|r| r.flows.len() == 2) {
        let (p, c) = (&with.flows[0], &with.flows[1]);
        let Some(alone) = ok
            .iter()
            .find(|a| a.flows.len() == 1 && a.flows[0].cc == p.cc && same_bottleneck(a, with))
        else {
            continue;
        };
        let a = &alone.flows[0];
        let Some(ratio) = metrics::ratio(p.throughput_bps, a.throughput_bps) else {
            continue;
        };
        let rtts = a.rtt_p95_ms.zip(p.rtt_p95_ms);
        points
            .entry(format!("{} vs {}", p.cc, c.cc))
            .or_default()
            .push(PairPoint {
                run: with.spec.id.clone(),
                ratio,
                utilization: with.link.as_ref().map(|l| l.utilization),
                harm_throughput: metrics::harm(a.throughput_bps, p.throughput_bps, true),
                harm_rtt_p95: rtts
                    .and_then(|(rtt_alone, rtt_with)| metrics::harm(rtt_alone, rtt_with, false)),
                rtt_p95_ratio: rtts
                    .and_then(|(rtt_alone, rtt_with)| metrics::ratio(rtt_with, rtt_alone)),
            });
    }
    points
        .into_iter()
        .map(|(k, pts)| {
            let ratios: Vec<f64> = pts.iter().map(|p| p.ratio).collect();
            let utils: Vec<f64> = pts.iter().filter_map(|p| p.utilization).collect();
            let harms: Vec<f64> = pts.iter().filter_map(|p| p.harm_throughput).collect();
            let low = ratios.iter().filter(|r| **r <= 0.8).count() as f64;
            let s = PairSummary {
                median_ratio: metrics::percentile(&ratios, 50.0),
                fraction_ratio_at_most_0_8: (!ratios.is_empty()).then(|| low / ratios.len() as f64),
                median_utilization: metrics::percentile(&utils, 50.0),
                mean_harm_throughput: mean(&harms),
                points: pts,
            };
            (k, s)
        })
        .collect()
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.4}")).unwrap_or_default()
}

/// One CSV row per run.
pub fn csv(runs: &[RunSummary]) -> String {
    let mut s = String::from(
        "run,status,bandwidth_mbps,rtt_ms,buffer_bytes,buffer_bdp,uplink_loss,flows,throughput_mbps,utilization,qdelay_p95_ms,inflation_ratio,jain,drops,late_share,max_late_ms,stall_drops,late_ack_share,steal_share,reason\n",
    );
    for r in runs {
        let ccs: Vec<&str> = r.spec.flows.iter().map(|f| f.cc.as_str()).collect();
        let tputs: Vec<String> = r
            .flows
            .iter()
            .map(|f| format!("{:.3}", f.throughput_bps / 1e6))
            .collect();
        let xs: Vec<f64> = r.flows.iter().map(|f| f.throughput_bps).collect();
        let link = r.link.as_ref();
        let _ = writeln!(
            s,
            "{},{:?},{},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"",
            r.spec.id,
            r.status,
            r.spec.bandwidth_mbps,
            r.spec.rtt_ms,
            r.spec.buffer_bytes,
            r.spec.buffer_bdp,
            r.spec.uplink_loss,
            ccs.join(";"),
            tputs.join(";"),
            fmt_opt(link.map(|l| l.utilization)),
            fmt_opt(link.and_then(|l| l.qdelay_p95_ms)),
            fmt_opt(link.and_then(|l| l.inflation_ratio)),
            fmt_opt(metrics::jain(&xs)),
            link.map(|l| l.drops.to_string()).unwrap_or_default(),
            fmt_opt(r.emulator.as_ref().and_then(runner::late_share)),
            fmt_opt(r.emulator.as_ref().and_then(runner::max_lateness_ms)),
            r.emulator
                .as_ref()
                .and_then(runner::stall_drops)
                .map(|n| n.to_string())
                .unwrap_or_default(),
            fmt_opt(r.datapath.and_then(AckLag::late_share)),
            fmt_opt(r.host_steal_share),
            r.reason.clone().unwrap_or_default().replace('"', "'"),
        );
    }
    s
}

fn chart<'a>(title: &'a str, x_label: &'a str, y_label: &'a str, steps: bool) -> Chart<'a> {
    Chart {
        title,
        x_label,
        y_label,
        steps,
    }
}

/// Where finished runs are read from.
#[derive(Debug)]
pub enum Source {
    /// A scenario's results directory: one directory per run, each with its `summary.json`.
    Dir(PathBuf),
    /// The runs of a `runs-<mode>.jsonl` archive ([`archive`]).
    Archive(Vec<RunSummary>),
}

impl Source {
    /// A `.csv` file is read as a summary CSV ([`csv`]) of `runs`, any other file as an
    /// archive; a directory is a results directory holding the scenario's directory (what
    /// `ccp-exp run --out` was given).
    pub fn open(path: &Path, scenario: &str, runs: &[RunSpec]) -> Result<Source, String> {
        if !path.is_file() {
            // A results directory, or the scenario's own directory in one.
            let dir = if path.file_name().is_some_and(|n| n == scenario) {
                path.to_path_buf()
            } else {
                path.join(scenario)
            };
            return Ok(Source::Dir(dir));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if path.extension().is_some_and(|e| e == "csv") {
            return from_csv(&text, runs)
                .map(Source::Archive)
                .map_err(|e| format!("{}: {e}", path.display()));
        }
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| {
                    format!("{} line {}: not a run summary: {e}", path.display(), i + 1)
                })
            })
            .collect::<Result<_, _>>()
            .map(Source::Archive)
    }

    /// Every summary this source holds of `spec`.
    fn find(&self, spec: &RunSpec) -> Vec<RunSummary> {
        match self {
            Source::Dir(d) => RunSummary::load(&d.join(&spec.id)).into_iter().collect(),
            Source::Archive(runs) => runs
                .iter()
                .filter(|r| r.spec.id == spec.id)
                .cloned()
                .collect(),
        }
    }
}

/// The runs of a summary CSV that `runs` still plans (same id, bottleneck and flows), for
/// grids measured before archives existed. A CSV carries less than an archive: each flow's
/// throughput and the link's utilization, drops, queueing delay and inflation, but no RTT of
/// a flow (so no harm to it) and no emulator lateness.
fn from_csv(text: &str, runs: &[RunSpec]) -> Result<Vec<RunSummary>, String> {
    // The reason is the last column; CSVs from before `stall_drops` have one column less,
    // from before `steal_share` two, from before `late_ack_share` three.
    const COLUMNS: std::ops::RangeInclusive<usize> = 17..=20;
    let mut lines = text.lines().enumerate();
    let columns = match lines.next() {
        Some((_, header)) if header.starts_with("run,") => header.split(',').count(),
        _ => 0,
    };
    if !COLUMNS.contains(&columns) {
        return Err("not a summary CSV of ccp-exp (its header differs)".into());
    }
    let mut out = Vec::new();
    for (i, line) in lines.filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |what: &str| format!("line {}: {what}", i + 1);
        // The reason, last, is quoted and may hold commas.
        let f: Vec<&str> = line.splitn(columns, ',').collect();
        if f.len() != columns {
            return Err(bad("too few columns"));
        }
        let Some(spec) = runs.iter().find(|r| r.id == f[0]) else {
            continue;
        };
        let ccs: Vec<&str> = f[7].split(';').collect();
        let planned: Vec<&str> = spec.flows.iter().map(|fl| fl.cc.as_str()).collect();
        if ccs != planned || f[4].parse::<u64>().ok() != Some(spec.buffer_bytes) {
            continue;
        }
        let status = match f[1] {
            "Ok" => Status::Ok,
            "Skipped" => Status::Skipped,
            "Failed" => Status::Failed,
            other => return Err(bad(&format!("status {other:?}"))),
        };
        let num = |x: &str| -> Result<Option<f64>, String> {
            (!x.is_empty())
                .then(|| {
                    x.parse::<f64>()
                        .map_err(|_| bad(&format!("{x:?} is not a number")))
                })
                .transpose()
        };
        let mbps: Vec<f64> = if f[8].is_empty() {
            Vec::new()
        } else {
            f[8].split(';')
                .map(|x| num(x).map(Option::unwrap_or_default))
                .collect::<Result<_, _>>()?
        };
        let flows = mbps
            .iter()
            .zip(&ccs)
            .enumerate()
            .map(|(k, (m, cc))| runner::FlowSummary {
                cc: cc.to_string(),
                role: spec.roles.get(k).cloned().unwrap_or_else(|| "flow".into()),
                throughput_bps: m * 1e6,
                lifetime_bps: m * 1e6,
                retransmits: 0,
                rtt_p50_ms: None,
                rtt_p95_ms: None,
                intervals: Vec::new(),
                intervals_source: "csv".into(),
            })
            .collect();
        let total_bps = mbps.iter().sum::<f64>() * 1e6;
        let link = num(f[9])?.map(|utilization| runner::LinkMetrics {
            max_goodput_bps: if utilization > 0.0 {
                total_bps / utilization
            } else {
                0.0
            },
            total_bps,
            utilization,
            drops: f[13].parse().unwrap_or(0),
            qdelay_p50_ms: None,
            qdelay_p95_ms: num(f[10]).ok().flatten(),
            rtt_p95_ms: None,
            inflation_ratio: num(f[11]).ok().flatten(),
        });
        let reason = f[columns - 1].trim_matches('"');
        out.push(RunSummary {
            status,
            reason: (!reason.is_empty()).then(|| reason.to_string()),
            spec: spec.clone(),
            flows,
            link,
            emulator: None,
            datapath: None,
            wall_s: 0.0,
            late_repeats: 0,
            host_steal_share: None,
        });
    }
    Ok(out)
}

/// The summaries of `runs` found in `sources` (e.g. one results directory per shard, or
/// archives of earlier sittings), in the plan's order: for each run the first finished one,
/// else the first found. A summary of a run whose parameters no longer match the plan's is
/// ignored.
pub fn collect(sources: &[Source], runs: &[RunSpec]) -> Vec<RunSummary> {
    runs.iter()
        .filter_map(|spec| {
            let found: Vec<RunSummary> = sources
                .iter()
                .flat_map(|s| s.find(spec))
                .filter(|s| s.spec == *spec)
                .collect();
            let first_ok = found.iter().position(|s| s.status == Status::Ok);
            found.into_iter().nth(first_ok.unwrap_or(0))
        })
        .collect()
}

/// Every run's summary, one JSON line each: committed beside a grid's CSV, it lets a later
/// sitting or another machine merge its runs with these (`ccp-exp report --from
/// runs-full.jsonl`) after the run directories are gone. It keeps what a report of `kind`
/// reads: a flow's delivery over time (100 ms intervals, most of a summary's size) only
/// for timelines.
pub fn archive(kind: Kind, runs: &[RunSummary]) -> Result<String, String> {
    runs.iter()
        .map(|r| {
            let mut r = r.clone();
            if kind != Kind::Timeline {
                r.flows.iter_mut().for_each(|f| f.intervals.clear());
            }
            serde_json::to_string(&r).map(|l| l + "\n")
        })
        .collect::<Result<String, _>>()
        .map_err(|e| e.to_string())
}

/// Writes the scenario's CSV, JSON and charts into `dir`; returns the JSON value written.
pub fn write(
    dir: &Path,
    plan: &Plan,
    mode: &str,
    runs: &[RunSummary],
) -> Result<serde_json::Value, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join(format!("summary-{mode}.csv")), csv(runs))
        .map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join(format!("runs-{mode}.jsonl")),
        archive(plan.kind, runs)?,
    )
    .map_err(|e| e.to_string())?;
    let ok: Vec<&RunSummary> = runs.iter().filter(|r| r.status == Status::Ok).collect();
    let stem = |name: &str| dir.join(format!("{name}-{mode}"));
    let plot_err = |e: plot::PlotError| e.to_string();
    let value = match plan.kind {
        Kind::PrimaryRatio | Kind::Harm => {
            let pairs = pairs(runs);
            let cdf_of = |f: &dyn Fn(&PairPoint) -> Option<f64>| -> Vec<Series> {
                pairs
                    .iter()
                    .map(|(k, s)| {
                        Series::line(
                            k.clone(),
                            metrics::cdf(&s.points.iter().filter_map(f).collect::<Vec<_>>()),
                        )
                    })
                    .collect()
            };
            plot::line_chart(
                &stem("ratio-cdf"),
                &chart(
                    "primary throughput ratio (with / alone)",
                    "ratio",
                    "CDF",
                    true,
                ),
                &cdf_of(&|p| Some(p.ratio)),
            )
            .map_err(plot_err)?;
            plot::line_chart(
                &stem("utilization-cdf"),
                &chart("joint utilization", "utilization", "CDF", true),
                &cdf_of(&|p| p.utilization),
            )
            .map_err(plot_err)?;
            if plan.kind == Kind::Harm {
                plot::line_chart(
                    &stem("harm-cdf"),
                    &chart("harm to the primary's throughput", "harm", "CDF", true),
                    &cdf_of(&|p| p.harm_throughput),
                )
                .map_err(plot_err)?;
            }
            serde_json::to_value(&pairs).map_err(|e| e.to_string())?
        }
        Kind::SingleFlow => {
            // A plan that sweeps random loss (Proteus B3) is read against the loss rate,
            // any other against the buffer (B1, B2).
            let mut losses: Vec<f64> = ok.iter().map(|r| r.spec.uplink_loss).collect();
            losses.sort_by(f64::total_cmp);
            losses.dedup();
            let (axis, x_label) = if losses.len() > 1 {
                ("loss", "random loss of the data path, %")
            } else {
                ("buffer", "log10(buffer / KB)")
            };
            let mut util: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            let mut infl: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for r in &ok {
                let (Some(f), Some(l)) = (r.flows.first(), r.link.as_ref()) else {
                    continue;
                };
                let x = if axis == "loss" {
                    r.spec.uplink_loss * 100.0
                } else {
                    (r.spec.buffer_bytes as f64 / 1000.0).log10()
                };
                util.entry(f.cc.clone())
                    .or_default()
                    .push((x, l.utilization));
                if let Some(i) = l.inflation_ratio {
                    infl.entry(f.cc.clone()).or_default().push((x, i));
                }
            }
            let to_series = |m: &BTreeMap<String, Vec<(f64, f64)>>| -> Vec<Series> {
                m.iter()
                    .map(|(k, v)| Series::repetitions(k.clone(), v))
                    .collect()
            };
            plot::line_chart(
                &stem(&format!("utilization-vs-{axis}")),
                &chart(
                    "single flow: utilization (line: median run; dots: each run)",
                    x_label,
                    "utilization",
                    false,
                ),
                &to_series(&util),
            )
            .map_err(plot_err)?;
            plot::line_chart(
                &stem(&format!("inflation-vs-{axis}")),
                &chart(
                    "single flow: p95 RTT inflation ratio (line: median run; dots: each run)",
                    x_label,
                    "(p95 RTT - base) / (buffer / rate)",
                    false,
                ),
                &to_series(&infl),
            )
            .map_err(plot_err)?;
            serde_json::json!({ "x": axis, "utilization": util, "inflation_ratio": infl })
        }
        Kind::Fairness => {
            let mut by_alg: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for r in &ok {
                let xs: Vec<f64> = r.flows.iter().map(|f| f.throughput_bps).collect();
                if let (Some(f), Some(j)) = (r.flows.first(), metrics::jain(&xs)) {
                    by_alg
                        .entry(f.cc.clone())
                        .or_default()
                        .push((xs.len() as f64, j));
                }
            }
            let series: Vec<Series> = by_alg
                .iter()
                .map(|(k, v)| Series::repetitions(k.clone(), v))
                .collect();
            plot::line_chart(
                &stem("jain-vs-n"),
                &chart(
                    "Jain's index of n flows (line: median run; dots: each run)",
                    "n",
                    "Jain index",
                    false,
                ),
                &series,
            )
            .map_err(plot_err)?;
            serde_json::json!({ "jain": by_alg })
        }
        Kind::Timeline => {
            for (i, r) in ok.iter().enumerate() {
                runner::timeline_chart(&stem(&format!("timeline-{i}")), &r.spec.id, &r.flows)
                    .map_err(plot_err)?;
            }
            serde_json::json!({
                "runs": ok.iter().map(|r| serde_json::json!({
                    "run": r.spec.id,
                    "flows": r.flows.iter().map(|f| serde_json::json!({
                        "cc": f.cc, "lifetime_mbps": f.lifetime_bps / 1e6
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>()
            })
        }
    };
    let counts = serde_json::json!({
        "ok": runs.iter().filter(|r| r.status == Status::Ok).count(),
        "skipped": runs.iter().filter(|r| r.status == Status::Skipped).count(),
        "failed": runs.iter().filter(|r| r.status == Status::Failed).count(),
    });
    let doc = serde_json::json!({ "scenario": plan.name, "mode": mode, "runs": counts, "results": value });
    std::fs::write(
        dir.join(format!("summary-{mode}.json")),
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exp::metrics::Interval;
    use crate::exp::plan::{FlowSpec, RunSpec, Testbed};
    use crate::exp::runner::{FlowSummary, LinkMetrics};

    fn flow(cc: &str, bps: f64, rtt_p95_ms: f64) -> FlowSummary {
        FlowSummary {
            cc: cc.into(),
            role: "flow".into(),
            throughput_bps: bps,
            lifetime_bps: bps,
            retransmits: 0,
            rtt_p50_ms: None,
            rtt_p95_ms: Some(rtt_p95_ms),
            intervals: vec![Interval {
                start_s: 0.0,
                end_s: 1.0,
                bytes: bps / 8.0,
            }],
            intervals_source: "emulator".into(),
        }
    }

    fn run(mbps: f64, flows: Vec<FlowSummary>, status: Status) -> RunSummary {
        RunSummary {
            status,
            reason: None,
            spec: RunSpec {
                id: format!("bw{mbps}-{}", flows.len()),
                bandwidth_mbps: mbps,
                rtt_ms: 30,
                buffer_bytes: 180_000,
                buffer_bdp: 1.0,
                uplink_loss: 0.0,
                testbed: Testbed::Mahimahi,
                duration_s: 20.0,
                flows: flows
                    .iter()
                    .map(|f| FlowSpec {
                        cc: f.cc.clone(),
                        start_s: 0.0,
                        stop_s: 20.0,
                        priority: vec![],
                        primary: None,
                    })
                    .collect(),
                measure_from_s: 10.0,
                measure_to_s: 20.0,
                roles: vec![],
                repeat: 1,
            },
            link: Some(LinkMetrics {
                max_goodput_bps: 46e6,
                total_bps: flows.iter().map(|f| f.throughput_bps).sum(),
                utilization: flows.iter().map(|f| f.throughput_bps).sum::<f64>() / 46e6,
                drops: 0,
                qdelay_p50_ms: None,
                qdelay_p95_ms: None,
                rtt_p95_ms: None,
                inflation_ratio: None,
            }),
            flows,
            emulator: None,
            datapath: None,
            wall_s: 0.0,
            late_repeats: 0,
            host_steal_share: None,
        }
    }

    #[test]
    fn pairs_compare_each_competing_run_with_the_primary_alone_on_the_same_bottleneck() {
        let runs = vec![
            run(48.0, vec![flow("bbr", 40e6, 50.0)], Status::Ok),
            run(
                48.0,
                vec![flow("bbr", 30e6, 100.0), flow("ccp:proteus-s", 10e6, 0.0)],
                Status::Ok,
            ),
            // Another bottleneck: its alone run is missing, so it yields no point.
            run(
                24.0,
                vec![flow("bbr", 10e6, 0.0), flow("ccp:proteus-s", 10e6, 0.0)],
                Status::Ok,
            ),
            // Skipped runs are ignored.
            run(
                48.0,
                vec![flow("bbr", 1.0, 0.0), flow("ccp:ledbat++", 1.0, 0.0)],
                Status::Skipped,
            ),
        ];
        let p = pairs(&runs);
        assert_eq!(p.len(), 1);
        let s = &p["bbr vs ccp:proteus-s"];
        assert_eq!(s.points.len(), 1);
        assert_eq!(s.median_ratio, Some(0.75));
        assert_eq!(s.fraction_ratio_at_most_0_8, Some(1.0));
        assert_eq!(s.mean_harm_throughput, Some(0.25));
        assert_eq!(s.points[0].harm_rtt_p95, Some(0.5));
        assert_eq!(s.points[0].rtt_p95_ratio, Some(2.0));
        assert!((s.median_utilization.expect("set") - 40e6 / 46e6).abs() < 1e-12);
    }

    #[test]
    fn a_lower_rtt_beside_the_competitor_is_no_harm_but_shows_in_the_ratio() {
        let runs = vec![
            run(48.0, vec![flow("bbr", 40e6, 50.0)], Status::Ok),
            run(
                48.0,
                vec![flow("bbr", 40e6, 40.0), flow("ccp:proteus-s", 1e6, 0.0)],
                Status::Ok,
            ),
        ];
        let point = &pairs(&runs)["bbr vs ccp:proteus-s"].points[0];
        assert_eq!(point.harm_rtt_p95, Some(0.0));
        assert_eq!(point.rtt_p95_ratio, Some(0.8));
    }

    #[test]
    fn csv_has_one_row_per_run_with_the_jain_index() {
        let runs = vec![run(
            48.0,
            vec![flow("cubic", 20e6, 0.0), flow("cubic", 20e6, 0.0)],
            Status::Ok,
        )];
        let text = csv(&runs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with(
            "bw48-2,Ok,48,30,180000,1.000,0,cubic;cubic,20.000;20.000,0.8696,,,1.0000,0,"
        ));
    }

    #[test]
    fn a_results_directory_or_the_scenarios_own_directory_is_read() {
        let out = Path::new("results");
        let own = out.join("jain");
        for p in [out, own.as_path()] {
            assert!(
                matches!(Source::open(p, "jain", &[]), Ok(Source::Dir(d)) if d == own),
                "{}",
                p.display()
            );
        }
    }

    #[test]
    fn an_archive_with_a_damaged_line_is_refused_with_its_line_number() {
        let path = std::env::temp_dir().join(format!("ccp-archive-{}.jsonl", std::process::id()));
        let good = archive(
            Kind::PrimaryRatio,
            &[run(48.0, vec![flow("cubic", 20e6, 40.0)], Status::Ok)],
        )
        .expect("archive");
        assert!(
            good.contains("\"intervals\":[]"),
            "intervals are left out: {good}"
        );
        std::fs::write(&path, format!("{good}\n{{\"status\": \"Ok\"}}\n")).expect("write");
        let err = Source::open(&path, "s", &[]).expect_err("damaged");
        assert!(err.contains("line 3"), "{err}");
        std::fs::write(&path, &good).expect("write");
        assert!(matches!(Source::open(&path, "s", &[]), Ok(Source::Archive(r)) if r.len() == 1));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_summary_csv_reads_back_as_the_runs_it_describes() {
        let plan = Plan::parse(
            r#"
            name = "csv"
            description = "t"
            kind = "primary-ratio"
            [full]
            bandwidth_mbps = [12, 48]
            rtt_ms = [30]
            buffer_bdp = [1.0]
            duration_s = 20
            primaries = ["cubic"]
            competitors = ["ccp:proteus-s"]
        "#,
        )
        .expect("valid");
        let specs = plan.runs(true).expect("runs");
        let runs: Vec<RunSummary> = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut r = run(
                    spec.bandwidth_mbps,
                    spec.flows
                        .iter()
                        .enumerate()
                        .map(|(k, f)| flow(&f.cc, (10.0 + i as f64 - 4.0 * k as f64) * 1e6, 40.0))
                        .collect(),
                    if i == 3 { Status::Failed } else { Status::Ok },
                );
                r.spec = spec.clone();
                r
            })
            .collect();
        let text = csv(&runs);
        // A row of a run the plan no longer has is left out.
        let extra = text
            .lines()
            .nth(1)
            .expect("row")
            .replacen("bw12", "bw99", 1);
        let path = std::env::temp_dir().join(format!("ccp-summary-{}.csv", std::process::id()));
        std::fs::write(&path, format!("{text}{extra}\n")).expect("write");
        let read = collect(&[Source::open(&path, "csv", &specs).expect("csv")], &specs);
        assert_eq!(csv(&read), text);
        assert_eq!(read[3].status, Status::Failed);
        // CSVs from before `stall_drops`, `steal_share` and `late_ack_share` too (one, two
        // and three columns less) read the same runs.
        let drop_column = |text: &str, name: &str| {
            let lines: Vec<String> = text
                .lines()
                .map(|l| {
                    let l = l.replace(&format!(",{name},"), ",");
                    match l.rfind(",,\"") {
                        Some(i) => format!("{}{}", &l[..i], &l[i + 1..]),
                        None => l,
                    }
                })
                .collect();
            lines.join("\n")
        };
        let before_stalls = drop_column(&text, "stall_drops");
        let before_steal = drop_column(&before_stalls, "steal_share");
        let before_late_acks = drop_column(&before_steal, "late_ack_share");
        let mut read = Vec::new();
        for (older, columns) in [
            (before_stalls, 19),
            (before_steal, 18),
            (before_late_acks, 17),
        ] {
            let header = older.lines().next().expect("header");
            assert_eq!(header.split(',').count(), columns);
            std::fs::write(&path, &older).expect("write");
            read = collect(&[Source::open(&path, "csv", &specs).expect("csv")], &specs);
            assert_eq!(csv(&read), text);
        }
        // The oldest shape's runs give the same ratio.
        let ratio = |rs: &[RunSummary]| pairs(rs)["cubic vs ccp:proteus-s"].median_ratio;
        assert_eq!(ratio(&read), ratio(&runs));
        std::fs::write(&path, "run,status\nx,Ok\n").expect("write");
        assert!(Source::open(&path, "csv", &specs).is_err());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_report_merged_from_shards_equals_the_report_of_one_directory() {
        use crate::exp::schedule::Shard;
        let plan = Plan::parse(
            r#"
            name = "merge"
            description = "t"
            kind = "primary-ratio"
            [full]
            bandwidth_mbps = [12, 24, 48]
            rtt_ms = [10, 30]
            buffer_bdp = [1.0]
            duration_s = 20
            primaries = ["cubic", "bbr"]
            competitors = ["ccp:proteus-s", "ccp:ledbat++"]
        "#,
        )
        .expect("valid");
        let specs = plan.runs(true).expect("runs");
        // Made-up results, one per run: the primary gets less beside a scavenger.
        let summary = |i: usize, spec: &RunSpec| {
            let mut r = run(
                spec.bandwidth_mbps,
                spec.flows
                    .iter()
                    .enumerate()
                    .map(|(k, f)| flow(&f.cc, (10.0 + i as f64 - 5.0 * k as f64) * 1e6, 40.0))
                    .collect(),
                Status::Ok,
            );
            r.spec = spec.clone();
            r
        };
        let root = std::env::temp_dir().join(format!("ccp-merge-{}", std::process::id()));
        let write_runs = |dir: &Path, which: &[(usize, RunSpec)]| {
            for (i, spec) in which {
                let d = dir.join(&plan.name).join(&spec.id);
                std::fs::create_dir_all(&d).expect("dir");
                let text = serde_json::to_string(&summary(*i, spec)).expect("json");
                std::fs::write(d.join("summary.json"), text).expect("write");
            }
        };
        let numbered: Vec<(usize, RunSpec)> = specs.iter().cloned().enumerate().collect();
        write_runs(&root.join("one"), &numbered);
        let shards: Vec<PathBuf> = (1..=3)
            .map(|k| {
                let d = root.join(format!("shard{k}"));
                write_runs(
                    &d,
                    &Shard { index: k, count: 3 }.select(&numbered, |(_, spec)| spec.bottleneck()),
                );
                d.join(&plan.name)
            })
            .collect();
        // A failed copy in the first shard of a run another shard finished does not hide it.
        let in_first =
            Shard { index: 1, count: 3 }.select(&numbered, |(_, spec)| spec.bottleneck());
        let (i, first) = numbered
            .iter()
            .find(|(i, _)| in_first.iter().all(|(j, _)| j != i))
            .expect("a run outside the first shard");
        let mut failed = summary(*i, first);
        failed.status = Status::Failed;
        let d = shards[0].join(&first.id);
        std::fs::create_dir_all(&d).expect("dir");
        std::fs::write(
            d.join("summary.json"),
            serde_json::to_string(&failed).expect("json"),
        )
        .expect("write");

        let single = collect(&[Source::Dir(root.join("one").join(&plan.name))], &specs);
        let dirs: Vec<Source> = shards.into_iter().map(Source::Dir).collect();
        let merged = collect(&dirs, &specs);
        assert_eq!(single.len(), specs.len());
        assert_eq!(merged.len(), specs.len());
        let (a, b) = (root.join("out-one"), root.join("out-merged"));
        let ja = write(&a, &plan, "full", &single).expect("report");
        let jb = write(&b, &plan, "full", &merged).expect("report");
        assert_eq!(ja, jb);
        // The first shard's runs read back from its archive, the others from their
        // directories, give the same report again.
        let first_archive = root.join("first.jsonl");
        std::fs::write(
            &first_archive,
            archive(plan.kind, &collect(&dirs[..1], &specs)).expect("archive"),
        )
        .expect("write");
        let mut mixed = vec![Source::open(&first_archive, &plan.name, &specs).expect("archive")];
        mixed.extend(dirs.into_iter().skip(1));
        let c = root.join("out-mixed");
        let jc = write(&c, &plan, "full", &collect(&mixed, &specs)).expect("report");
        assert_eq!(ja, jc);
        for f in [
            "summary-full.csv",
            "summary-full.json",
            "ratio-cdf-full.svg",
            "runs-full.jsonl",
        ] {
            let read = |d: &Path| std::fs::read(d.join(f)).expect(f);
            assert!(read(&a) == read(&b), "{f} differs");
            assert!(read(&a) == read(&c), "{f} differs (archive)");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
