//! A job for the unit tests only: the client counts its training samples of each label and
//! uploads the counts. It exists to show what adding a job costs: this file and its line in the
//! registry, nothing else — its messages travel in [`ToClient::Custom`] and
//! [`ToCoordinator::Custom`] ([`super::custom`]), and the simulator, the coordinator's pool and
//! the edge client dispatch to it through the registry. Its tests run it through the simulator's
//! pool and through the wire (command → device → reply → the server's judgement).

use serde::{Deserialize, Serialize};

use crate::client::{ClientData, ClientError};
use crate::protocol::{Encoding, ToClient, ToCoordinator};
use crate::train::Device;

use super::{Alone, JobKind, Rejected, Rejection, Trainer, Uploads, WireError, custom};

/// Count the training samples of each label `0..classes`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct LabelCountsJob {
    /// The data set's classes.
    pub classes: u32,
}

/// The job kind.
#[derive(Debug, Clone, Copy)]
pub struct LabelCounts;

impl JobKind for LabelCounts {
    const NAME: &'static str = "label-counts";
    const UPLOADS: Uploads = Uploads::Signatures;
    type Job<'a> = LabelCountsJob;
    /// Samples of each label `0..classes`.
    type Answer = Vec<u32>;

    fn floats_down(_: &LabelCountsJob) -> usize {
        0
    }

    fn floats_up(counts: &Vec<u32>) -> usize {
        counts.len()
    }

    fn command(job: &LabelCountsJob, _: Encoding) -> Result<ToClient, WireError> {
        custom::command::<Self, _>(job)
    }

    fn reply(
        _: &LabelCountsJob,
        counts: &Vec<u32>,
        _: Encoding,
    ) -> Result<ToCoordinator, WireError> {
        custom::reply::<Self, _>(counts)
    }

    /// One count per label, at least one sample in all.
    fn accept(job: &LabelCountsJob, body: ToCoordinator) -> Result<Vec<u32>, Rejected> {
        let counts: Vec<u32> = custom::of_reply::<Self, _>(body)?;
        if counts.len() != job.classes as usize || counts.iter().all(|&c| c == 0) {
            return Err(Rejected::new(
                Rejection::WrongSize,
                format!("{} label counts", counts.len()),
            ));
        }
        Ok(counts)
    }

    fn execute(
        job: &LabelCountsJob,
        data: ClientData<'_>,
        _: &Device,
        _: &mut dyn Trainer,
    ) -> Result<Vec<u32>, ClientError> {
        let mut counts = vec![0u32; job.classes as usize];
        for &l in &data.train.labels {
            *counts
                .get_mut(usize::from(l))
                .ok_or(ClientError::NoData("a label beyond the job's classes"))? += 1;
        }
        Ok(counts)
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        _: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let job = custom::of_command::<Self, LabelCountsJob>(cmd)?;
        Some((|| {
            let job = job?;
            let counts = Self::execute(&job, data, device, &mut Alone)?;
            Ok(Self::reply(&job, &counts, Encoding::F32)?)
        })())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::fmnist::FashionMnist;
    use crate::data::partition::{PartitionSpec, partition};
    use crate::federation::{Answer, ClientPool, Job};
    use crate::protocol::{Envelope, id};
    use crate::sim::SimPool;
    use crate::train::{Backend, LocalData};

    /// In the simulator: each client's counts are its shard's (the partition is the truth).
    #[test]
    fn the_simulator_runs_a_job_added_in_one_file() {
        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = "label:2".parse().unwrap();
        let part = partition(&spec, &data.train.labels, 4, 3).unwrap();
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        let jobs: Vec<(usize, Job<'_>)> = (0..4)
            .map(|c| (c, Job::LabelCounts(LabelCountsJob { classes: 10 })))
            .collect();
        let answers = pool.run(1, &jobs).unwrap();
        assert_eq!(answers.len(), 4);
        for (c, a) in answers {
            let Answer::LabelCounts(counts) = a else {
                panic!("{} for label counts", a.name())
            };
            let shard = &part.clients[c];
            let mut want = vec![0u32; 10];
            for &i in &shard.train {
                want[usize::from(data.train.labels[i])] += 1;
            }
            assert_eq!(counts, want, "client {c}");
            let present: Vec<u8> = (0..10).filter(|&l| counts[usize::from(l)] > 0).collect();
            assert_eq!(present, shard.labels, "client {c}");
        }
    }

    /// Over the wire: the command in its envelope's bytes, served by the device's entry point,
    /// the reply's bytes judged by the server; a reply of the wrong length or kind is refused.
    #[test]
    fn the_wire_carries_a_job_added_in_one_file() {
        let train = LocalData::new(vec![0; 5 * 784], vec![3, 3, 7, 0, 3]);
        let data = ClientData {
            train: &train,
            test: None,
        };
        let device = Backend::Flex.device().unwrap();
        let job = Job::LabelCounts(LabelCountsJob { classes: 10 });
        let run = id("r").unwrap();
        let sent = Envelope::new(run.clone(), 1, job.command(Encoding::F32).unwrap()).to_bytes();
        let cmd = Envelope::<ToClient>::from_bytes(&sent).unwrap().body;
        let reply = super::super::serve(&cmd, data, &device, 1)
            .unwrap()
            .unwrap();
        let back = Envelope::new(run, 1, reply).to_bytes();
        let body = Envelope::<ToCoordinator>::from_bytes(&back).unwrap().body;
        let Answer::LabelCounts(counts) = job.accept(body).unwrap() else {
            panic!()
        };
        assert_eq!(counts, [1, 0, 0, 3, 0, 0, 0, 1, 0, 0]);
        let short = custom::reply::<LabelCounts, _>(&vec![1u32; 9]).unwrap();
        assert_eq!(job.accept(short).unwrap_err().reason, Rejection::WrongSize);
        let other = ToCoordinator::Custom {
            kind: crate::protocol::text("another-job"),
            body: vec![],
        };
        assert_eq!(job.accept(other).unwrap_err().reason, Rejection::Unexpected);
        let garbage = ToCoordinator::Custom {
            kind: crate::protocol::text(LabelCounts::NAME),
            body: vec![0xFF; 3],
        };
        assert_eq!(
            job.accept(garbage).unwrap_err().reason,
            Rejection::Malformed
        );
    }
}
