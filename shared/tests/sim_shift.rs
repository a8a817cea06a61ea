//! The in-process pool's shared evaluation ([`SimPool`] evaluates each model once per (rotation,
//! label shift) and cuts every client's report out of it) against evaluating each client on its
//! own local test set built by `client_datasets`, for partitions with label shifts and rotations.

use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, client_datasets, partition};
use edgecfl_shared::federation::{Answer, ClientPool, Job};
use edgecfl_shared::jobs::EvaluateJob;
use edgecfl_shared::model::Params;
use edgecfl_shared::protocol::ModelKind;
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::{Backend, EvalReport, LocalData, evaluate};

#[test]
fn pooled_evaluation_matches_each_clients_own_test_set() {
    let data = FashionMnist::bundled().unwrap();
    // 8 clients: label shift 3·(i % 2), rotation (i / 2) % 2: all four (rotation, shift) pairs.
    let spec: PartitionSpec = "rotate:2*shift:2".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 8, 3).unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    // Two models, so that clients sharing a (rotation, shift) but not a model are kept apart.
    let models = [
        Params::init(ModelKind::LeNet5, 1),
        Params::init(ModelKind::LeNet5, 2),
    ];
    let jobs: Vec<(usize, Job<'_>)> = (0..8)
        .map(|c| {
            (
                c,
                Job::Evaluate(EvaluateJob {
                    model: &models[(c / 4) % 2],
                }),
            )
        })
        .collect();
    let pooled: Vec<(usize, EvalReport)> = pool
        .run(1, &jobs)
        .unwrap()
        .into_iter()
        .map(|(c, a)| match a {
            Answer::Evaluation(r) => (c, *r),
            other => panic!("{} for an evaluation", other.name()),
        })
        .collect();
    assert_eq!(pooled.len(), 8);

    let device = Backend::Flex.device().unwrap();
    for (c, report) in pooled {
        let shard = &part.clients[c];
        let (_, test) = client_datasets(&data, shard).unwrap();
        let all: Vec<usize> = (0..test.len()).collect();
        // `client_datasets` has rotated and shifted the test set already.
        let local = LocalData::from_dataset(&test, &all, 0);
        let direct = evaluate(&models[(c / 4) % 2], &local, 250, &device).unwrap();
        assert_eq!(report.total, direct.total, "client {c}");
        assert_eq!(report.correct, direct.correct, "client {c}");
        assert_eq!(report.total_per_label, direct.total_per_label, "client {c}");
        assert_eq!(
            report.correct_per_label, direct.correct_per_label,
            "client {c}"
        );
        let tol = 1e-4 * direct.loss_sum.abs().max(1.0);
        assert!(
            (report.loss_sum - direct.loss_sum).abs() <= tol,
            "client {c}: {} vs {}",
            report.loss_sum,
            direct.loss_sum
        );
    }
}
