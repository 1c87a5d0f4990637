use super::scenario::*;
use super::*;

#[test]
fn debug_print() {
    let r = kafka_21401(OwnershipIndex::PerProcess);
    for st in &r.steps {
        println!("== {}", st.label);
        for m in &st.members {
            println!(
                "  {} inst={:?} proc={} ep={} {} A={:?} S={:?} pendA={:?} pendS={:?} tA={:?} tS={:?}",
                m.member_id,
                m.instance_id,
                m.process_id,
                m.epoch,
                m.state,
                m.active,
                m.standby,
                m.pending_active,
                m.pending_standby,
                m.target_active,
                m.target_standby
            );
        }
    }
    println!("{:?}", r.a3_answer);
}
