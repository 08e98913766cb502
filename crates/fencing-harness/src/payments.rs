//! The payment gateway the workers send refunds to, as its own process: it creates a refund
//! once per idempotency key (the refund id), answers lookups by key, and appends every call to
//! a journal, one JSON object per line, which the audit reads afterwards.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::{BoxError, Record, RecordKey, SideEffect};
use serde::{Deserialize, Serialize};

use crate::http::{self, Request};

/// Threads that take connections in turn when the gateway has no latency.
pub const ANSWERING_THREADS: usize = 4;

/// How long a shared thread waits for a connection's first byte before it hands the
/// connection to a thread of its own (a caller stopped between its connect and its request).
pub const FIRST_BYTE_WAIT: Duration = Duration::from_millis(50);

/// What a call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A create that made a refund.
    Created,
    /// A create whose key was used before: the earlier refund is returned, nothing is made.
    Replayed,
    /// A create whose key was used before with another amount: refused.
    Conflict,
    /// A lookup that found the refund.
    Found,
    /// A lookup that found nothing.
    Absent,
}

/// One line of the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The call's position, from 1.
    pub seq: u64,
    /// The refund id, which is the idempotency key.
    pub key: String,
    /// What the call did.
    pub outcome: Outcome,
    /// The amount asked for (creates only).
    pub amount_cents: Option<i64>,
    /// The caller's lease holder id (creates only).
    pub by: Option<String>,
    /// The gateway's reference for the refund, when there is one.
    pub reference: Option<String>,
}

/// The gateway's state and its journal.
#[derive(Debug)]
pub struct Gateway {
    refunds: HashMap<String, (String, i64)>,
    journal: File,
    seq: u64,
}

impl Gateway {
    /// A gateway with no refunds, appending to a new journal at `path`.
    pub fn new(path: &Path) -> io::Result<Self> {
        Ok(Gateway {
            refunds: HashMap::new(),
            journal: File::create(path)?,
            seq: 0,
        })
    }

    /// Answers one request: `POST /refunds/<key>` with body `amount_cents=<n>&by=<holder>`
    /// creates (or replays) a refund; `GET /refunds/<key>` looks one up. Returns the status
    /// and body; the call is in the journal, flushed, before the answer leaves.
    pub fn handle(&mut self, request: &Request) -> io::Result<(u16, String)> {
        let Some(key) = request
            .path
            .strip_prefix("/refunds/")
            .filter(|k| valid_key(k))
        else {
            return Ok((404, format!("no such resource: {}", request.path)));
        };
        let key = key.to_owned();
        match request.method.as_str() {
            "GET" => {
                let reference = self.refunds.get(&key).map(|(r, _)| r.clone());
                let outcome = match reference {
                    Some(_) => Outcome::Found,
                    None => Outcome::Absent,
                };
                self.record(&key, outcome, None, None, reference.clone())?;
                Ok(match reference {
                    Some(reference) => (200, reference),
                    None => (404, format!("no refund {key}")),
                })
            }
            "POST" => {
                let Some((amount, by)) = parse_create(&request.body) else {
                    return Ok((400, "expected amount_cents=<n>&by=<holder>".to_owned()));
                };
                let (status, outcome, reference) = match self.refunds.get(&key) {
                    Some((reference, cents)) if *cents == amount => {
                        (200, Outcome::Replayed, reference.clone())
                    }
                    Some((reference, _)) => (409, Outcome::Conflict, reference.clone()),
                    None => {
                        let reference = format!("re_{:05}", self.refunds.len() + 1);
                        self.refunds
                            .insert(key.clone(), (reference.clone(), amount));
                        (201, Outcome::Created, reference)
                    }
                };
                self.record(
                    &key,
                    outcome,
                    Some(amount),
                    Some(by),
                    Some(reference.clone()),
                )?;
                Ok((status, reference))
            }
            other => Ok((400, format!("method {other} is not served"))),
        }
    }

    /// Serves `listener` until the process ends. Calls take effect one at a time, which
    /// keeps the journal in their order.
    ///
    /// With a `latency` (a real gateway's round trip), each connection has a thread of its
    /// own that waits it out, so that calls overlap. With none, [`ANSWERING_THREADS`] threads
    /// take connections in turn (a thread per call would cost more CPU than the call), and a
    /// connection whose request has not begun within [`FIRST_BYTE_WAIT`] gets a thread of its
    /// own: a caller stopped between its connect and its request holds up no other call.
    pub fn serve(self, listener: TcpListener, latency: Duration) -> io::Result<()> {
        let gateway = Arc::new(Mutex::new(self));
        if !latency.is_zero() {
            for stream in listener.incoming() {
                let (stream, gateway) = (stream?, gateway.clone());
                std::thread::spawn(move || Self::answer(&gateway, &stream, latency));
            }
            return Ok(());
        }
        let answering: Vec<_> = (0..ANSWERING_THREADS)
            .map(|_| {
                let (listener, gateway) = (listener.try_clone()?, gateway.clone());
                Ok(std::thread::spawn(move || -> io::Result<()> {
                    for stream in listener.incoming() {
                        Self::answer_or_hand_off(&gateway, stream?);
                    }
                    Ok(())
                }))
            })
            .collect::<io::Result<_>>()?;
        for thread in answering {
            thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("an answering thread panicked")))?;
        }
        Ok(())
    }

    /// Answers `stream` on this thread if its request has begun, else on a thread of its own.
    /// A connection whose socket refuses the timeouts is answered here (its caller is gone, or
    /// its answer is an error at worst): it is never the gateway's failure.
    fn answer_or_hand_off(gateway: &Arc<Mutex<Self>>, stream: TcpStream) {
        let begun = stream
            .set_read_timeout(Some(FIRST_BYTE_WAIT))
            .and_then(|()| stream.peek(&mut [0u8; 1]));
        let _ = stream.set_read_timeout(None);
        match begun {
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let gateway = gateway.clone();
                std::thread::spawn(move || Self::answer(&gateway, &stream, Duration::ZERO));
            }
            _ => Self::answer(gateway, &stream, Duration::ZERO),
        }
    }

    /// Reads one call from `stream`, waits `latency`, makes it take effect and answers it.
    fn answer(gateway: &Mutex<Self>, stream: &TcpStream, latency: Duration) {
        let answer = match http::read_request(stream) {
            Ok(request) => {
                std::thread::sleep(latency);
                let mut gateway = gateway.lock().unwrap_or_else(|e| e.into_inner());
                match gateway.handle(&request) {
                    Ok(answer) => answer,
                    // A call it cannot journal must not be answered: the audit would miss a
                    // refund that was made.
                    Err(err) => {
                        eprintln!("gateway: cannot journal a call: {err}");
                        std::process::exit(1);
                    }
                }
            }
            Err(err) => (400, err.to_string()),
        };
        // A caller that vanished (killed mid-call) is not the gateway's failure.
        let _ = http::write_response(stream, answer.0, &answer.1);
    }

    fn record(
        &mut self,
        key: &str,
        outcome: Outcome,
        amount_cents: Option<i64>,
        by: Option<String>,
        reference: Option<String>,
    ) -> io::Result<()> {
        self.seq += 1;
        let entry = JournalEntry {
            seq: self.seq,
            key: key.to_owned(),
            outcome,
            amount_cents,
            by,
            reference,
        };
        let line = serde_json::to_string(&entry).map_err(io::Error::other)?;
        writeln!(self.journal, "{line}")?;
        self.journal.flush()
    }
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn parse_create(body: &str) -> Option<(i64, String)> {
    let mut amount = None;
    let mut by = None;
    for pair in body.split('&') {
        match pair.split_once('=')? {
            ("amount_cents", n) => amount = n.parse::<i64>().ok().filter(|n| *n > 0),
            ("by", holder) if !holder.is_empty() => by = Some(holder.to_owned()),
            _ => return None,
        }
    }
    Some((amount?, by?))
}

/// The gateway as a worker's acquisition calls it: the refund id as idempotency key, the
/// acquisition's holder as `by`.
pub struct GatewayCall<'a> {
    /// The gateway, as HOST:PORT.
    pub addr: &'a str,
    /// The acquisition calling, as the journal names it.
    pub by: &'a str,
    /// The amount of each refund it may send.
    pub amounts: &'a HashMap<RecordKey, i64>,
    /// Runs once the gateway answered a create (to say so, or to stop the process there).
    pub after_perform: &'a (dyn Fn(&RecordKey) + Send + Sync),
}

#[async_trait]
impl SideEffect for GatewayCall<'_> {
    type Receipt = String;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<String>, BoxError> {
        let path = format!("/refunds/{key}");
        match http::call(self.addr, "GET", &path, "").await? {
            (200, reference) => Ok(Some(reference)),
            (404, _) => Ok(None),
            (status, body) => Err(format!("gateway lookup of {key}: {status} {body}").into()),
        }
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<String, BoxError> {
        let cents = self
            .amounts
            .get(key)
            .ok_or_else(|| format!("no amount for {key}"))?;
        let body = format!("amount_cents={cents}&by={}", self.by);
        let path = format!("/refunds/{key}");
        let reference = match http::call(self.addr, "POST", &path, &body).await? {
            (200 | 201, reference) => reference,
            (status, body) => {
                return Err(format!("gateway refund of {key}: {status} {body}").into());
            }
        };
        (self.after_perform)(key);
        Ok(reference)
    }
}

/// Reads a journal back, line by line.
pub fn read_journal(path: &Path) -> io::Result<Vec<JournalEntry>> {
    let reader = BufReader::new(File::open(path)?);
    reader
        .lines()
        .map(|line| {
            serde_json::from_str(&line?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, body: &str) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            body: body.into(),
        }
    }

    #[test]
    fn a_key_creates_one_refund_and_every_call_is_journalled() {
        let dir = std::env::temp_dir().join(fencing_testkit::unique_name("gateway"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("journal.jsonl");
        let mut gateway = Gateway::new(&path).unwrap();
        let create = request("POST", "/refunds/r_815", "amount_cents=7025&by=A");
        assert_eq!(
            gateway
                .handle(&request("GET", "/refunds/r_815", ""))
                .unwrap()
                .0,
            404
        );
        assert_eq!(gateway.handle(&create).unwrap(), (201, "re_00001".into()));
        assert_eq!(gateway.handle(&create).unwrap(), (200, "re_00001".into()));
        let other_amount = request("POST", "/refunds/r_815", "amount_cents=1&by=B");
        assert_eq!(gateway.handle(&other_amount).unwrap().0, 409);
        assert_eq!(
            gateway
                .handle(&request("GET", "/refunds/r_815", ""))
                .unwrap(),
            (200, "re_00001".into())
        );
        for bad in [
            request("POST", "/refunds/r_1", "amount_cents=-5&by=A"),
            request("POST", "/refunds/r_1", "amount_cents=5"),
            request("POST", "/refunds/r_1", "amount_cents=5&by=A&x=1"),
            request("DELETE", "/refunds/r_1", ""),
        ] {
            assert_eq!(gateway.handle(&bad).unwrap().0, 400, "{bad:?}");
        }
        assert_eq!(
            gateway
                .handle(&request("GET", "/refunds/../x", ""))
                .unwrap()
                .0,
            404
        );
        let outcomes: Vec<Outcome> = read_journal(&path)
            .unwrap()
            .into_iter()
            .map(|e| e.outcome)
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Absent,
                Outcome::Created,
                Outcome::Replayed,
                Outcome::Conflict,
                Outcome::Found
            ]
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Sends `GET /refunds/<key>` on `stream` and returns the response's status line,
    /// waiting at most 20 s for it.
    fn lookup(mut stream: &TcpStream, key: &str) -> String {
        use std::io::Read as _;
        write!(
            stream,
            "GET /refunds/{key} HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.lines().next().unwrap_or_default().to_owned()
    }

    #[test]
    fn callers_silent_after_connecting_hold_up_no_other_call_and_are_answered_later() {
        let dir = std::env::temp_dir().join(fencing_testkit::unique_name("gateway-silent"));
        std::fs::create_dir_all(&dir).unwrap();
        let gateway = Gateway::new(&dir.join("journal.jsonl")).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || gateway.serve(listener, Duration::ZERO));
        // More silent callers than threads answering: a stopped worker's half-made calls.
        let silent: Vec<TcpStream> = (0..=ANSWERING_THREADS)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        std::thread::sleep(FIRST_BYTE_WAIT * 4);
        let other = TcpStream::connect(addr).unwrap();
        assert_eq!(lookup(&other, "r_1"), "HTTP/1.1 404 Not Found");
        for (i, stream) in silent.iter().enumerate() {
            assert_eq!(lookup(stream, &format!("r_{i}")), "HTTP/1.1 404 Not Found");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
