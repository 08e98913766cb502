//! Just enough HTTP/1.1 for the gateway and its callers: one request per connection, a
//! `Content-Length` body, `Connection: close`. Both ends are this crate's, so anything else
//! is refused rather than half-understood.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Requests larger than this are refused: the gateway's bodies are a few dozen bytes.
const MAX_BODY: usize = 4096;

/// One request as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, as sent.
    pub path: String,
    /// The body, as text.
    pub body: String,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads one request from `stream`.
pub fn read_request(stream: &TcpStream) -> io::Result<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path), Some("HTTP/1.1")) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid(format!("not an HTTP/1.1 request line: {line:?}")));
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 {
            return Err(invalid("the connection closed inside the headers"));
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value
                .trim()
                .parse()
                .map_err(|_| invalid(format!("a bad Content-Length: {value:?}")))?;
        }
    }
    if length > MAX_BODY {
        return Err(invalid(format!(
            "a body of {length} bytes; at most {MAX_BODY}"
        )));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let body = String::from_utf8(body).map_err(|_| invalid("a body that is not UTF-8"))?;
    Ok(Request { method, path, body })
}

/// Writes a response with `status` and a text `body`, then the server closes.
pub fn write_response(mut stream: &TcpStream, status: u16, body: &str) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        _ => "Status",
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// Sends one request to `addr` and returns the status and body of its response.
pub async fn call(addr: &str, method: &str, path: &str, body: &str) -> io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8(response).map_err(|_| invalid("a response not in UTF-8"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| invalid("a response without the end of its headers"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid(format!("a bad status line: {head:?}")))?;
    Ok((status, body.to_owned()))
}
