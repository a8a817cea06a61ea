//! The jobs a server asks of a client, one file per kind of job.
//!
//! A method asks its clients for work with [`Job`]s and reads their [`Answer`]s; everything about
//! one kind of job lives in its file and its [`JobKind`] implementation: the job and its answer
//! as a method sees them, the command and the reply on the wire (the postcard messages of
//! [`crate::protocol`], whose bytes `shared/tests/protocol.rs` pins), how a client executes it on
//! its data, how the server judges an answer that arrives over a network (its kind, its
//! dimensions, finite values, values in range), which trained models an answer carries (for the
//! checks every runtime applies: sample bound, norm bound, equal weighting), and how many floats
//! and bytes it moves.
//!
//! The runtimes dispatch through the registry below: the in-process pool of `simulate`
//! ([`Job::execute`]), the coordinator's MQTT pool ([`Job::command`], [`Job::accept`]) and the
//! edge client ([`serve`]). Adding a job is one file implementing [`JobKind`] plus one line in
//! the registry's invocation at the foot of this file; a job whose messages are not among the
//! protocol's carries them in [`ToClient::Custom`] and [`ToCoordinator::Custom`] ([`custom`]), so
//! neither the protocol nor a runtime changes. `label_counts.rs`, a job compiled for the unit
//! tests only, is such a job, run through the simulator and the wire in its tests.
//!
//! | file | job | answer | used by |
//! | --- | --- | --- | --- |
//! | [`train`] | [`Job::Train`] | [`Answer::Update`] | every method's training round (FedProx, FeSEM: with a proximal term) |
//! | [`signature`] | [`Job::Signature`] | [`Answer::Signature`] | FedClust, AdaCFL round 0 (warm-up, then some layers; AdaCFL adds label statistics) |
//! | [`train_pair`] | [`Job::TrainPair`] | [`Answer::Pair`] | StoCFL's bi-level step |
//! | [`pick`] | [`Job::Pick`] | [`Answer::Picked`] | IFCA (lowest local loss of K models, train that one) |
//! | [`gradient`] | [`Job::Gradient`] | [`Answer::Gradient`] | StoCFL's anchor gradient |
//! | [`gram_signature`] | [`Job::GramSignature`] | [`Answer::Eigenpairs`] | MT-HFL round 0 |
//! | [`relevance`] | [`Job::Relevance`] | [`Answer::Row`] | MT-HFL round 0, relevance on the clients |
//! | [`subspace`] | [`Job::Subspace`] | [`Answer::Subspace`] | PACFL round 0 |
//! | [`evaluate`] | [`Job::Evaluate`] | [`Answer::Evaluation`] | every method |
//!
//! MT-HFL's two jobs keep state between messages on a device (the exact own signature, the relay
//! that comes on the broadcast topic): the edge client's worker holds it and the simulator keeps
//! the exact signatures; their files hold the computation.

use crate::client::{ClientData, ClientError};
use crate::model::Params;
use crate::protocol::{Encoding, ToClient, ToCoordinator};
use crate::train::Device;

pub mod custom;
pub mod evaluate;
pub mod gradient;
pub mod gram_signature;
#[cfg(test)]
mod label_counts;
pub mod pick;
pub mod rejection;
pub mod relevance;
pub mod signature;
pub mod subspace;
pub mod train;
pub mod train_pair;

pub use evaluate::EvaluateJob;
pub use gradient::GradientJob;
pub use gram_signature::GramJob;
pub use pick::{PickJob, Picked};
pub use rejection::{Rejected, Rejection};
pub use relevance::RelevanceJob;
pub use signature::{LabelStats, SignatureJob, SignatureUpload};
pub use subspace::SubspaceJob;
pub use train::{Alone, Prox, Trainer, Training, Update};
pub use train_pair::{Pair, PairJob};

/// A job or answer that has no message of the wire protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{job}: {reason}")]
pub struct WireError {
    /// The job's name ([`Job::name`]).
    pub job: &'static str,
    /// Why.
    pub reason: String,
}

impl WireError {
    /// `job`'s kind cannot be sent as asked, because of `reason`.
    pub fn new<K: JobKind>(reason: impl Into<String>) -> Self {
        WireError {
            job: K::NAME,
            reason: reason.into(),
        }
    }
}

/// Which of the coordinator's byte counters a job's answers go to (`summary.json`'s `wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uploads {
    /// Round-0 signatures, label statistics, eigenpairs, gradients.
    Signatures,
    /// Trained models (each answer also counts as one update).
    Models,
    /// MT-HFL's relevance rows.
    RelevanceRows,
    /// Evaluations (the phase is an evaluation phase).
    Evaluations,
}

/// A message every client of a job depends on, sent once to all on the broadcast topic before
/// the jobs (MT-HFL's relay of signatures).
#[derive(Debug, Clone)]
pub struct Broadcast {
    /// The message.
    pub message: ToClient,
    /// What to tell the user when it is too large for the wire.
    pub too_large: String,
}

/// Everything about one kind of job. Implemented by a unit type per file; the registry's
/// [`Job`] and [`Answer`] hold its [`JobKind::Job`] and [`JobKind::Answer`].
pub trait JobKind {
    /// A short name for logs and errors (`train`, `pick`, ...).
    const NAME: &'static str;
    /// Which byte counter its answers go to.
    const UPLOADS: Uploads;
    /// Whether a client without training samples cannot do it (true but for evaluation).
    const NEEDS_TRAINING_DATA: bool = true;

    /// Whether its [`JobKind::execute`] hands work to its [`Trainer`] (trainings, IFCA's losses,
    /// StoCFL's gradients): the jobs the in-process pool gathers into cohorts.
    const TRAINS: bool = false;
    /// The job as a method builds it (models lent by the method).
    type Job<'a>: std::fmt::Debug + Clone;
    /// The answer as a method reads it.
    type Answer: std::fmt::Debug + Clone;

    /// Floats the job carries down to the client (models, relays), for the counts of a run.
    fn floats_down(job: &Self::Job<'_>) -> usize;

    /// Floats the answer carries up.
    fn floats_up(answer: &Self::Answer) -> usize;

    /// The command that asks a client for `job`, models sent in f32 and the upload asked in
    /// `upload`.
    ///
    /// # Errors
    ///
    /// [`WireError`] for a job the protocol cannot express.
    fn command(job: &Self::Job<'_>, upload: Encoding) -> Result<ToClient, WireError>;

    /// A message the clients need beside their commands, broadcast once (none by default).
    ///
    /// # Errors
    ///
    /// [`WireError`] when it cannot be built.
    fn broadcast(_job: &Self::Job<'_>) -> Result<Option<Broadcast>, WireError> {
        Ok(None)
    }

    /// The message a client sends for `answer`, in `upload` (the encoding the command asked).
    ///
    /// # Errors
    ///
    /// [`WireError`] when the answer cannot be sent as the job asked.
    fn reply(
        job: &Self::Job<'_>,
        answer: &Self::Answer,
        upload: Encoding,
    ) -> Result<ToCoordinator, WireError>;

    /// The server's judgement of a reply `body` from a client it sent `job`: the answer, when it
    /// is of this job's kind, of the job's dimensions, finite and in range.
    ///
    /// # Errors
    ///
    /// [`Rejected`] with the reason ([`Rejection::Unexpected`] for a message of another kind).
    fn accept(job: &Self::Job<'_>, body: ToCoordinator) -> Result<Self::Answer, Rejected>;

    /// Does `job` on a client's `data`, every local training through `trainer` ([`Alone`] on a
    /// device; the in-process pool batches many clients' trainings into cohorts).
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the computation fails or the job is malformed for this client.
    fn execute(
        job: &Self::Job<'_>,
        data: ClientData<'_>,
        device: &Device,
        trainer: &mut dyn Trainer,
    ) -> Result<Self::Answer, ClientError>;

    /// On a device: `cmd`, when it is this kind's command, decoded into a job (with `threads`
    /// training threads), executed on `data` and answered. `None` for another kind's command.
    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>>;

    /// The models the answer's trained updates started from, in the order of
    /// [`JobKind::updates`] (`None` when the answer does not fit the job, e.g. a choice out of
    /// range). Jobs that train nothing have none.
    fn starts<'a>(_job: &Self::Job<'a>, _answer: &Self::Answer) -> Option<Vec<&'a Params>> {
        Some(Vec::new())
    }

    /// The trained updates the answer carries.
    fn updates(_answer: &mut Self::Answer) -> Vec<&mut Update> {
        Vec::new()
    }
}

/// The registry: one line per kind of job, `Variant(file::Kind) => AnswerVariant`, in the order
/// of [`Job`]'s variants. Generates [`Job`], [`Answer`] and their dispatch to the kinds.
macro_rules! registry {
    ($( $(#[doc = $doc:expr])* $(#[cfg($cfg:meta)])? $job:ident($kind:ty) => $answer:ident ),* $(,)?) => {
        /// Work for one client (see the module docs for the table of kinds).
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum Job<'a> {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])? $job(<$kind as JobKind>::Job<'a>), )*
        }

        /// A client's answer to a [`Job`], of the variant the registry pairs with the job's.
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum Answer {
            $( #[doc = concat!("To [`Job::", stringify!($job), "`].")]
               $(#[cfg($cfg)])? $answer(<$kind as JobKind>::Answer), )*
        }

        impl<'a> Job<'a> {
            /// A short name for logs and errors.
            pub fn name(&self) -> &'static str {
                match self { $( $(#[cfg($cfg)])? Job::$job(_) => <$kind as JobKind>::NAME, )* }
            }

            /// Whether it trains ([`JobKind::TRAINS`]).
            pub fn trains(&self) -> bool {
                match self { $( $(#[cfg($cfg)])? Job::$job(_) => <$kind as JobKind>::TRAINS, )* }
            }

            /// Which byte counter its answers go to.
            pub fn uploads(&self) -> Uploads {
                match self { $( $(#[cfg($cfg)])? Job::$job(_) => <$kind as JobKind>::UPLOADS, )* }
            }

            /// Floats this job carries down to the client (models, relays), for byte counts.
            pub fn floats_down(&self) -> usize {
                match self { $( $(#[cfg($cfg)])? Job::$job(j) => <$kind as JobKind>::floats_down(j), )* }
            }

            /// The command that asks a client for this job ([`JobKind::command`]).
            ///
            /// # Errors
            ///
            /// [`WireError`] for a job the protocol cannot express.
            pub fn command(&self, upload: Encoding) -> Result<ToClient, WireError> {
                match self { $( $(#[cfg($cfg)])? Job::$job(j) => <$kind as JobKind>::command(j, upload), )* }
            }

            /// The broadcast this job needs beside its command ([`JobKind::broadcast`]).
            ///
            /// # Errors
            ///
            /// [`WireError`] when it cannot be built.
            pub fn broadcast(&self) -> Result<Option<Broadcast>, WireError> {
                match self { $( $(#[cfg($cfg)])? Job::$job(j) => <$kind as JobKind>::broadcast(j), )* }
            }

            /// The server's judgement of a client's reply ([`JobKind::accept`]).
            ///
            /// # Errors
            ///
            /// [`Rejected`] with the reason.
            pub fn accept(&self, body: ToCoordinator) -> Result<Answer, Rejected> {
                match self {
                    $( $(#[cfg($cfg)])? Job::$job(j) => <$kind as JobKind>::accept(j, body).map(Answer::$answer), )*
                }
            }

            /// Does this job on a client's `data` ([`JobKind::execute`]), training alone.
            ///
            /// # Errors
            ///
            /// [`ClientError`] when the computation fails.
            pub fn execute(&self, data: ClientData<'_>, device: &Device) -> Result<Answer, ClientError> {
                self.execute_with(data, device, &mut Alone)
            }

            /// [`Job::execute`] with every local training through `trainer`.
            ///
            /// # Errors
            ///
            /// [`ClientError`] when the computation fails.
            pub fn execute_with(
                &self,
                data: ClientData<'_>,
                device: &Device,
                trainer: &mut dyn Trainer,
            ) -> Result<Answer, ClientError> {
                match self {
                    $( $(#[cfg($cfg)])? Job::$job(j) => {
                        if <$kind as JobKind>::NEEDS_TRAINING_DATA && data.train.is_empty() {
                            return Err(ClientError::NoData("no training samples"));
                        }
                        <$kind as JobKind>::execute(j, data, device, trainer).map(Answer::$answer)
                    } )*
                }
            }

            /// The message a client sends for `answer` ([`JobKind::reply`]).
            ///
            /// # Errors
            ///
            /// [`WireError`] when `answer` is not of this job's kind or cannot be sent.
            pub fn reply(&self, answer: &Answer, upload: Encoding) -> Result<ToCoordinator, WireError> {
                match (self, answer) {
                    $( $(#[cfg($cfg)])? (Job::$job(j), Answer::$answer(a)) => <$kind as JobKind>::reply(j, a, upload), )*
                    _ => Err(WireError {
                        job: self.name(),
                        reason: format!("{} does not answer it", answer.name()),
                    }),
                }
            }

            /// Whether `answer` is of the kind this job asks for.
            pub fn accepts(&self, answer: &Answer) -> bool {
                match (self, answer) {
                    $( $(#[cfg($cfg)])? (Job::$job(_), Answer::$answer(_)) => true, )*
                    _ => false,
                }
            }

            /// The trained updates of `answer` with the model each started from
            /// ([`JobKind::starts`], [`JobKind::updates`]); `None` when `answer` is not of this
            /// job's kind or does not fit it.
            pub fn trained<'x>(&self, answer: &'x mut Answer) -> Option<Vec<(&'a Params, &'x mut Update)>> {
                match (self, answer) {
                    $( $(#[cfg($cfg)])? (Job::$job(j), Answer::$answer(a)) => {
                        let starts = <$kind as JobKind>::starts(j, a)?;
                        let updates = <$kind as JobKind>::updates(a);
                        (starts.len() == updates.len()).then(|| starts.into_iter().zip(updates).collect())
                    } )*
                    _ => None,
                }
            }
        }

        impl Answer {
            /// Floats this answer carries up (models, signatures, rows), for byte counts.
            pub fn floats_up(&self) -> usize {
                match self { $( $(#[cfg($cfg)])? Answer::$answer(a) => <$kind as JobKind>::floats_up(a), )* }
            }

            /// A short name for logs and errors.
            pub fn name(&self) -> &'static str {
                match self { $( $(#[cfg($cfg)])? Answer::$answer(_) => stringify!($answer), )* }
            }

            /// The trained updates it carries ([`JobKind::updates`]).
            pub fn updates(&mut self) -> Vec<&mut Update> {
                match self { $( $(#[cfg($cfg)])? Answer::$answer(a) => <$kind as JobKind>::updates(a), )* }
            }
        }

        /// On a device: the reply to a job command `cmd` ([`JobKind::serve`] of the kind that owns
        /// it), `None` for a command that is not a job or is done by the device's runtime
        /// (MT-HFL's stateful jobs).
        pub fn serve(
            cmd: &ToClient,
            data: ClientData<'_>,
            device: &Device,
            threads: usize,
        ) -> Option<Result<ToCoordinator, ClientError>> {
            $(
                $(#[cfg($cfg)])?
                {
                    if let Some(reply) = <$kind as JobKind>::serve(cmd, data, device, threads) {
                        return Some(reply);
                    }
                }
            )*
            None
        }
    };
}

registry! {
    /// Train and upload the whole model.
    Train(train::Train) => Update,
    /// Train, then upload only some layers of the result (round 0's signature), optionally with
    /// label statistics.
    Signature(signature::Signature) => Signature,
    /// Two trainings on the same data, both uploaded (StoCFL).
    TrainPair(train_pair::TrainPair) => Pair,
    /// IFCA: the loss of each candidate, then train the best one.
    Pick(pick::Pick) => Picked,
    /// StoCFL: the normalised gradient at the anchor model.
    Gradient(gradient::Gradient) => Gradient,
    /// MT-HFL: the leading eigenpairs of the data's Gram matrix.
    GramSignature(gram_signature::GramSignature) => Eigenpairs,
    /// MT-HFL: the relevance row against every client's signature.
    Relevance(relevance::Relevance) => Row,
    /// PACFL: the top left singular vectors of each class's images.
    Subspace(subspace::SubspaceSignature) => Subspace,
    /// Evaluate a model on the local test set.
    Evaluate(evaluate::Evaluate) => Evaluation,
    /// A job for the unit tests: count the training samples of each label.
    #[cfg(test)]
    LabelCounts(label_counts::LabelCounts) => LabelCounts,
}

/// Bytes of a message's postcard encoding (the body of its envelope: without the version, run
/// id and round, which every message carries alike).
pub fn encoded_len<M: serde::Serialize>(message: &M) -> u64 {
    postcard::experimental::serialized_size(message).map_or(0, |n| n as u64)
}

/// [`Rejected`] for a reply of another kind than the job's.
pub(crate) fn unexpected(body: &ToCoordinator) -> Rejected {
    Rejected::new(Rejection::Unexpected, rejection::kind_name(body))
}
