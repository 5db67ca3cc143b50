//! scale: N pods with M secondary attachments each, attached and then deleted, `parallel` at a
//! time (as a runtime starting many pods does), per side: total times, failures, and what
//! was left behind (interfaces in the pods, host veths, IPAM allocations, state records).

use serde_json::json;

use super::macvlan_sides::{bulk, pods, Op, Sides};
use super::report::{Figure, Target};
use super::runner::{Pod, Runtime};
use super::stats::load;
use super::topology::Lab;
use super::{check_interrupt, Bench, Side};

/// Interfaces other than `lo` still in the pods' namespaces.
pub fn pod_links(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .flat_map(|p| {
            p.netns.link_names().into_iter().filter(|l| l != "lo").map(move |l| format!("{l} in {}", p.name))
        })
        .collect()
}

pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    let (n, m, parallel) = (b.set.scale_pods, b.set.scale_attachments, b.set.parallel);
    let sides = Sides::start(b, lab, "scale")?;
    let drivers = sides.drivers(b)?;
    let runtimes: Vec<Runtime> =
        (0..parallel).map(|_| Runtime::spawn(&lab.node)).collect::<Result<_, _>>()?;
    let params = json!({"pods": n, "attachments": m, "parallel": parallel});
    let what = sides.what();
    // Issue #17: adding and deleting the pods takes at most 0.6x the reference's time.
    let total = |metric| {
        Figure::new("scale", metric, "s", params.clone()).sides(what).with_target(Target::at_most(
            Side::Reference,
            0.6,
            "issue #17",
        ))
    };
    let count = |metric| Figure::new("scale", metric, "count", params.clone()).sides(what);
    let mut figs: Vec<Figure> =
        vec![total("add_total"), total("del_total"), count("failures"), count("leftovers")];
    sides.mark_missing(&mut figs);
    let before = load();
    for r in 1..=b.set.repeat {
        for (side, driver) in &drivers {
            check_interrupt()?;
            let tag = format!("s{r}");
            let pods = pods(*side, &tag, n, m)?;
            let veths_before = lab.node_veths();
            let add = bulk(Op::Add, driver.as_ref(), &runtimes, &pods);
            check_interrupt()?;
            let del = bulk(Op::Del, driver.as_ref(), &runtimes, &pods);
            let mut left = pod_links(&pods);
            left.extend(
                lab.node_veths()
                    .into_iter()
                    .filter(|v| !veths_before.contains(v))
                    .map(|v| format!("node link {v}")),
            );
            left.extend(driver.leftover_files());
            drop(pods);
            b.progress(
                "scale",
                &format!(
                    "repeat {r}/{}: {}: {n} pods x {m}: add {:.2} s, del {:.2} s, {} failures, {} leftovers",
                    b.set.repeat,
                    side.name(),
                    add.secs,
                    del.secs,
                    add.failures.len() + del.failures.len(),
                    left.len()
                ),
            );
            let failures: Vec<&String> = add.failures.iter().chain(&del.failures).collect();
            let sample: Vec<&&String> = failures.iter().take(3).collect();
            figs[0].push(*side, add.secs, json!({"failed": add.failures.len()}));
            figs[1].push(*side, del.secs, json!({"failed": del.failures.len()}));
            figs[2].push(*side, failures.len() as f64, json!({"first": sample}));
            figs[3].push(*side, left.len() as f64, json!({"first": left.iter().take(5).collect::<Vec<_>>()}));
        }
    }
    let after = load();
    for mut f in figs {
        f.set_load(&before, &after);
        b.figures.push(f);
    }
    Ok(())
}
