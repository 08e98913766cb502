//! The queue that hands a settlement to a worker: one SQS message per run (on the emulator),
//! received with a visibility timeout, kept invisible while a worker works on it, deleted once
//! the job is finished. A worker that stalls stops extending it; the message becomes visible
//! again and another worker receives it, which is how worker B gets the job in the worked
//! example.
//!
//! The queue decides who works, never what is written: a stalled worker can wake up still
//! holding its receipt handle (the emulator, unlike SQS, honours an old one), so the job's
//! deletion is gated by a fenced write, as every other effect of the job is.

use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use fencing_test_support::aws;

type QueueError = Box<dyn std::error::Error + Send + Sync>;

/// An SQS client on the emulator at `endpoint`.
pub fn client(endpoint: &str) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(aws::region())
            .credentials_provider(aws::credentials())
            .http_client(aws::http_client())
            .build(),
    )
}

/// The visibility timeout for a lease of `ttl`: whole seconds (all SQS takes), rounded up, at
/// least one. A worker extends it every third of the TTL, as its renewal does the lease.
pub fn visibility_for(ttl: Duration) -> i32 {
    let secs = ttl.as_millis().div_ceil(1000).max(1);
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// A run's job queue.
#[derive(Clone, Debug)]
pub struct JobQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
}

/// A job message as one receive handed it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobMessage {
    /// The message's id: the same on every delivery.
    pub id: String,
    /// This delivery's handle, which extends and deletes it.
    pub receipt_handle: String,
    /// How many times the message has been received, this delivery included.
    pub receives: u32,
    /// What the message says (the job of the settlement at scale names its merchant).
    pub body: String,
}

/// What is left in a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueDepth {
    /// Messages any worker can receive now.
    pub visible: u64,
    /// Messages received and not yet deleted, invisible until their timeout.
    pub in_flight: u64,
}

impl JobQueue {
    /// Creates the queue `name` and puts the job `body` on it.
    pub async fn create(
        sqs: aws_sdk_sqs::Client,
        name: &str,
        body: &str,
    ) -> Result<JobQueue, QueueError> {
        let queue = Self::create_empty(sqs, name).await?;
        queue.send(body).await?;
        Ok(queue)
    }

    /// Creates the queue `name`, with nothing on it.
    pub async fn create_empty(
        sqs: aws_sdk_sqs::Client,
        name: &str,
    ) -> Result<JobQueue, QueueError> {
        let created = sqs.create_queue().queue_name(name).send().await?;
        let url = created
            .queue_url()
            .ok_or("the emulator created a queue without a URL")?
            .to_owned();
        Ok(JobQueue { sqs, url })
    }

    /// Puts a job saying `body` on the queue.
    pub async fn send(&self, body: &str) -> Result<(), QueueError> {
        self.sqs
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await?;
        Ok(())
    }

    /// The queue at `url`.
    pub fn at(sqs: aws_sdk_sqs::Client, url: impl Into<String>) -> JobQueue {
        JobQueue {
            sqs,
            url: url.into(),
        }
    }

    /// Receives the job if it is visible, hiding it from every other receiver for
    /// `visibility_secs`; `None` when it is not (another worker has it, or it is deleted).
    pub async fn receive(&self, visibility_secs: i32) -> Result<Option<JobMessage>, QueueError> {
        let received = self
            .sqs
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(1)
            .visibility_timeout(visibility_secs)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await?;
        let Some(message) = received.messages().first() else {
            return Ok(None);
        };
        let receives = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|n| n.parse().ok())
            .ok_or("a message without its receive count")?;
        Ok(Some(JobMessage {
            id: message
                .message_id()
                .ok_or("a message without an id")?
                .to_owned(),
            receipt_handle: message
                .receipt_handle()
                .ok_or("a message without a receipt handle")?
                .to_owned(),
            receives,
            body: message.body().unwrap_or_default().to_owned(),
        }))
    }

    /// Keeps `message` invisible for another `visibility_secs` from now.
    pub async fn extend(
        &self,
        message: &JobMessage,
        visibility_secs: i32,
    ) -> Result<(), QueueError> {
        self.sqs
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(&message.receipt_handle)
            .visibility_timeout(visibility_secs)
            .send()
            .await?;
        Ok(())
    }

    /// Deletes `message`: the job is done.
    pub async fn delete(&self, message: &JobMessage) -> Result<(), QueueError> {
        self.sqs
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(&message.receipt_handle)
            .send()
            .await?;
        Ok(())
    }

    /// Deletes the queue itself, whatever is left on it.
    pub async fn delete_queue(&self) -> Result<(), QueueError> {
        self.sqs.delete_queue().queue_url(&self.url).send().await?;
        Ok(())
    }

    /// What is left in the queue, as the service counts it.
    pub async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let answer = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await?;
        let count = |name: &QueueAttributeName| -> Result<u64, QueueError> {
            answer
                .attributes()
                .and_then(|a| a.get(name))
                .ok_or_else(|| format!("the queue's attributes lack {name:?}"))?
                .parse()
                .map_err(|e| format!("{name:?}: {e}").into())
        };
        Ok(QueueDepth {
            visible: count(&QueueAttributeName::ApproximateNumberOfMessages)?,
            in_flight: count(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible)?,
        })
    }
}

/// Keeps a received message invisible while a worker works on it: extends it every
/// `every` until dropped. A stalled process stops extending with everything else, which is
/// what lets the queue redeliver the job.
pub struct VisibilityKeeper {
    task: tokio::task::JoinHandle<()>,
}

impl VisibilityKeeper {
    /// Starts extending `message` on `queue` by `visibility_secs` every `every`.
    pub fn start(
        queue: JobQueue,
        message: JobMessage,
        visibility_secs: i32,
        every: Duration,
    ) -> Self {
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(err) = queue.extend(&message, visibility_secs).await {
                    println!("failed extending {}: {err}", message.id);
                }
            }
        });
        VisibilityKeeper { task }
    }
}

impl Drop for VisibilityKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_visibility_timeout_is_the_ttl_in_whole_seconds_rounded_up() {
        assert_eq!(visibility_for(Duration::from_millis(1)), 1);
        assert_eq!(visibility_for(Duration::from_millis(800)), 1);
        assert_eq!(visibility_for(Duration::from_millis(1000)), 1);
        assert_eq!(visibility_for(Duration::from_millis(1500)), 2);
        assert_eq!(visibility_for(Duration::from_secs(30)), 30);
    }
}
