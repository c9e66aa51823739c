//! Full duplex over WebSocket with tokio-tungstenite.

use std::net::SocketAddr;

use bidi_http::Server;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

use crate::support::{Probe, registry, serve, settle, start};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

async fn open(addr: SocketAddr, path: &str) -> Socket {
    connect_async(format!("ws://{addr}{path}")).await.unwrap().0
}

async fn send(socket: &mut Socket, frame: Value) {
    socket.send(Message::text(frame.to_string())).await.unwrap();
}

/// The next text frame, as JSON.
async fn next(socket: &mut Socket) -> Value {
    loop {
        match socket.next().await.unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a text frame, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_socket_is_one_connection_turn_by_turn() {
    let addr = serve(registry(&Probe::default())).await;
    let mut socket = open(addr, "/bidi-flow/echo").await;
    send(&mut socket, json!({"type": "init", "init": "> "})).await;
    send(&mut socket, json!({"type": "send", "input": "hello there"})).await;
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "chunk", "chunk": "> hello"})
    );
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "chunk", "chunk": "> there"})
    );
    assert_eq!(next(&mut socket).await, json!({"type": "turn_end"}));
    send(&mut socket, json!({"type": "send", "input": "again"})).await;
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "chunk", "chunk": "> again"})
    );
    assert_eq!(next(&mut socket).await, json!({"type": "turn_end"}));
    send(&mut socket, json!({"type": "close"})).await;
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "output", "output": 2})
    );
    match socket.next().await.unwrap().unwrap() {
        Message::Close(Some(frame)) => assert_eq!(frame.code, CloseCode::Normal),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_sent_ahead_are_taken_in_order() {
    let addr = serve(registry(&Probe::default())).await;
    let mut socket = open(addr, "/bidi-flow/echo").await;
    send(&mut socket, json!({"type": "init", "init": ""})).await;
    for i in 0..50 {
        send(
            &mut socket,
            json!({"type": "send", "input": format!("w{i}")}),
        )
        .await;
    }
    send(&mut socket, json!({"type": "close"})).await;
    for i in 0..50 {
        assert_eq!(
            next(&mut socket).await,
            json!({"type": "chunk", "chunk": format!("w{i}")})
        );
        assert_eq!(next(&mut socket).await, json!({"type": "turn_end"}));
    }
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "output", "output": 50})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_are_answered_and_the_socket_goes_on() {
    let addr = start(Server::new(registry(&Probe::default())).max_message_bytes(1024)).await;
    let mut socket = open(addr, "/bidi-flow/echo").await;
    send(&mut socket, json!({"type": "send", "input": "too early"})).await;
    assert_eq!(next(&mut socket).await["code"], "unknown_connection");
    send(&mut socket, json!({"type": "init", "init": 5})).await;
    let refused = next(&mut socket).await;
    assert_eq!(
        (refused["code"].as_str(), refused["path"].as_str()),
        (Some("invalid_init"), Some(""))
    );
    send(&mut socket, json!({"type": "init", "init": "> "})).await;
    socket.send(Message::text("{not json")).await.unwrap();
    assert_eq!(next(&mut socket).await["code"], "malformed_frame");
    send(&mut socket, json!({"type": "dance"})).await;
    assert_eq!(next(&mut socket).await["code"], "unknown_frame_type");
    send(&mut socket, json!({"type": "send", "input": 42})).await;
    assert_eq!(next(&mut socket).await["code"], "invalid_input");
    send(&mut socket, json!({"type": "init", "init": "> "})).await;
    assert_eq!(next(&mut socket).await["code"], "duplicate_connection");
    socket.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next(&mut socket).await["code"], "malformed_frame");
    send(
        &mut socket,
        json!({"type": "send", "input": "x".repeat(1500)}),
    )
    .await;
    assert_eq!(next(&mut socket).await["code"], "frame_too_large");
    // Everything refused changed nothing.
    send(&mut socket, json!({"type": "send", "input": "still here"})).await;
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "chunk", "chunk": "> still"})
    );
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "chunk", "chunk": "> here"})
    );
    assert_eq!(next(&mut socket).await, json!({"type": "turn_end"}));
    send(&mut socket, json!({"type": "close"})).await;
    assert_eq!(
        next(&mut socket).await,
        json!({"type": "output", "output": 1})
    );

    // Past twice the limit the message is not read at all: 1009.
    let mut socket = open(addr, "/bidi-flow/echo").await;
    send(&mut socket, json!({"type": "init", "init": "> "})).await;
    let huge = json!({"type": "send", "input": "x".repeat(200_000)});
    let _ = socket.send(Message::text(huge.to_string())).await;
    loop {
        match socket.next().await {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(frame.code, CloseCode::Size);
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => panic!("the socket ended without a 1009 close"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_actions_and_plain_gets_are_refused_before_the_upgrade() {
    let addr = serve(registry(&Probe::default())).await;
    let error = connect_async(format!("ws://{addr}/bidi-flow/ecko"))
        .await
        .unwrap_err();
    match error {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status().as_u16(), 404);
        }
        other => panic!("expected a 404, got {other}"),
    }
    let plain = reqwest::get(format!("http://{addr}/bidi-flow/echo"))
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 426);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_slows_the_action() {
    let probe = Probe::default();
    let addr = serve(registry(&probe)).await;
    let mut socket = open(addr, "/bidi-flow/forever").await;
    // 64 KiB chunks, never read: the socket's buffers fill, then the action waits.
    send(&mut socket, json!({"type": "init", "init": 65_536})).await;
    let last = probe.stalled().await;
    // Reading lets it go on.
    for _ in 0..last + 20 {
        assert_eq!(next(&mut socket).await["type"], "chunk");
    }
    assert!(probe.sent() > last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_seen_while_an_input_waits_and_a_dropped_socket_cancels() {
    let (ended, mut how) = mpsc::unbounded_channel();
    let probe = Probe {
        ended: Some(ended),
        ..Probe::default()
    };
    let addr = start(Server::new(registry(&probe))).await;
    settle(1).await;
    let baseline = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();

    // `mute` never takes an input: after the window of 8, sends wait; a cancel still gets in.
    let mut socket = open(addr, "/bidi-flow/mute").await;
    send(&mut socket, json!({"type": "init"})).await;
    for i in 0..12 {
        send(
            &mut socket,
            json!({"type": "send", "input": format!("{i}")}),
        )
        .await;
    }
    send(&mut socket, json!({"type": "cancel", "reason": "enough"})).await;
    assert_eq!(how.recv().await.unwrap(), "enough");
    let mut last = next(&mut socket).await;
    while last["code"] == "send_failed" {
        last = next(&mut socket).await;
    }
    assert_eq!(last["code"], "cancelled", "{last}");
    assert!(last["message"].as_str().unwrap().contains("enough"));
    drop(socket);
    settle(baseline).await;

    // A socket dropped mid-stream cancels its connection.
    let mut socket = open(addr, "/bidi-flow/forever").await;
    send(&mut socket, json!({"type": "init", "init": 8})).await;
    assert_eq!(next(&mut socket).await["type"], "chunk");
    drop(socket);
    assert_eq!(how.recv().await.unwrap(), "disconnected");
    settle(baseline).await;
}

/// A client that sends large inputs an action never takes is read only so far ahead, in bytes:
/// the server stops reading, and the client's writes stall after a few frames, however many it
/// has. Counted in frames of 3 MB, against a window of 8 inputs plus what the socket buffers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_inputs_ahead_of_the_action_are_bounded_in_bytes() {
    // Both ends' kernel buffers fixed small: autotuned, the server's receive buffer alone may
    // grow to `tcp_rmem`'s maximum (32 MB on some machines), blurring the count.
    let router = Server::new(registry(&Probe::default()))
        .max_message_bytes(4 << 20)
        .router();
    let listening = tokio::net::TcpSocket::new_v4().unwrap();
    listening.set_recv_buffer_size(256 << 10).unwrap();
    listening.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = listening.listen(64).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let tcp = tokio::net::TcpSocket::new_v4().unwrap();
    tcp.set_send_buffer_size(64 << 10).unwrap();
    let tcp = tcp.connect(addr).await.unwrap();
    let url = format!("ws://{addr}/bidi-flow/mute");
    let (mut socket, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    socket
        .send(Message::text(json!({"type": "init"}).to_string()))
        .await
        .unwrap();
    let frame = Message::text(json!({"type": "send", "input": "x".repeat(3_000_000)}).to_string());
    let mut sent = 0;
    for _ in 0..40 {
        let write = tokio::time::timeout(
            std::time::Duration::from_secs(3),
            socket.send(frame.clone()),
        )
        .await;
        match write {
            Ok(result) => {
                result.unwrap();
                sent += 1;
            }
            Err(_) => break, // The server stopped reading: the write stalls.
        }
    }
    // The input waiting to be taken, a frame read ahead, one being read, and one in the
    // client's hands; a window of 8 inputs made it 10 or more.
    eprintln!("{sent} frames of 3 MB taken ahead of the action");
    assert!(sent < 8, "{sent} frames of 3 MB taken ahead of the action");
}
