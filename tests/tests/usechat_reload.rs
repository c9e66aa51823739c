//! A page reloaded mid-conversation gets it back: a React page on the AI SDK's `useChat`
//! (`@ai-sdk/react`, bundled by esbuild from `tests/node/browser/chat.jsx`) fetches the stored
//! chat as `UIMessage[]` from `GET /agent/assistant/chat/{id}`, hands it to
//! `useChat({ messages })`, and goes on with the same chat, in a headless Chromium; a page
//! opened mid-answer (a reload, a second tab, another origin) shows the question above the
//! answer it resumes.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use axum::Router;
use axum::http::header;
use axum::response::Html;
use axum::routing::{get, post};
use bidi_flow::Registry;
use bidi_http::{Cors, Server};
use bidi_llm::testing::{ChannelModel, DemoModel};
use bidi_llm::{LlmAgent, ModelEvent};
use futures_util::StreamExt as _;
use serde_json::json;
use tests::browser::{browse, bundle};
use tokio::sync::mpsc::UnboundedSender;

const PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"></head>
<body><div id="root"></div><script type="module" src="/chat.js"></script></body></html>"#;

/// The page and its script.
fn page(script: Vec<u8>) -> Router {
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route(
            "/chat.js",
            get(move || {
                let script = script.clone();
                async move { ([(header::CONTENT_TYPE, "text/javascript")], script) }
            }),
        )
}

/// The demo assistant and the page, on a free port of 127.0.0.1.
async fn serve(script: Vec<u8>) -> SocketAddr {
    let assistant = LlmAgent::builder("assistant", DemoModel).build();
    tests::http::serve(
        Server::new(Registry::new())
            .agent(&assistant)
            .protocol(bidi_ai_sdk::Chat::new())
            .routes(page(script)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_chat_restores_a_stored_conversation_and_goes_on_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let script = tokio::task::spawn_blocking(move || std::fs::read(bundle("chat", &path)).unwrap())
        .await
        .unwrap();
    let addr = serve(script).await;

    // The conversation so far, as a first page had it.
    let first = json!({"id": "reload-1", "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]}]});
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/agent/assistant/chat"))
        .body(first.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(answer.ends_with("data: [DONE]\n\n"), "{answer}");

    // The reloaded page.
    let url = format!("http://{addr}/?chat=reload-1&prompt=and%20again");
    let dom = tokio::task::spawn_blocking(move || browse(&url, r#"body[data-done="1"]"#, None))
        .await
        .unwrap();
    assert!(
        dom.contains(r#"data-done="1""#),
        "the page did not finish:\n{dom}"
    );
    assert!(!dom.contains(r#"class="error""#), "{dom}");
    let order = [
        r#"class="user" data-id="u0">hello there<"#,
        r#"class="assistant" data-id="a1">You said: hello there<"#,
        ">and again<",
        ">You said: and again<",
    ];
    let mut from = 0;
    for piece in order {
        let at = dom[from..]
            .find(piece)
            .unwrap_or_else(|| panic!("no {piece} after the earlier messages in:\n{dom}"));
        from += at + piece.len();
    }
}

/// What the model of a held answer says first, and the rest the page's `/release` lets out.
const FIRST: &str = "Hel";
const REST: &str = "lo!";

/// The assistant answering what the test sends its model, with `POST /release` finishing the
/// answer; `page` serves the page beside it, `cors` lets a page of that origin call it.
async fn held(
    page: Option<Router>,
    cors: Option<String>,
) -> (SocketAddr, UnboundedSender<ModelEvent>) {
    let (model, answer) = ChannelModel::new();
    let assistant = LlmAgent::builder("assistant", model).build();
    let release = answer.clone();
    let routes = Router::new().route(
        "/release",
        post(move || {
            bidi_llm::testing::finish_text(&release, REST);
            async {}
        }),
    );
    let mut server = Server::new(Registry::new())
        .agent(&assistant)
        .protocol(bidi_ai_sdk::Chat::new())
        .routes(routes.merge(page.unwrap_or_default()));
    if let Some(origin) = cors {
        server = server.cors(Cors::origins([origin]).unwrap());
    }
    (tests::http::serve(server).await, answer)
}

/// How the page comes to a chat whose answer is streaming.
#[derive(Debug, Clone, Copy)]
enum Opened {
    /// The page that asked reloads: its first client is gone.
    Reload,
    /// A second tab: the first client still reads the answer.
    SecondTab,
    /// A page of another origin, calling the server through CORS.
    OtherOrigin,
}

/// A page opened mid-answer follows the README's reload recipe (the stored chat, then
/// `useChat({ messages, resume: true })`) and shows the question above its answer, from the
/// stored conversation alone: the running turn's question is in it. With the AI SDK 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_opened_mid_answer_shows_the_question_above_it() {
    mid_answer("chat").await;
}

/// The same with the AI SDK 7 (`ai` 7 and `@ai-sdk/react` 4, from `tests/node7`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_the_ai_sdk_7_opened_mid_answer_shows_the_question_above_it() {
    mid_answer("chat-ai7").await;
}

/// Opens `page` mid-answer in the three ways of [`Opened`], checking each shows the question
/// above the answer it resumes.
async fn mid_answer(page_name: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    let script =
        tokio::task::spawn_blocking(move || std::fs::read(bundle(page_name, &path)).unwrap())
            .await
            .unwrap();
    for (n, opened) in [Opened::Reload, Opened::SecondTab, Opened::OtherOrigin]
        .into_iter()
        .enumerate()
    {
        let (addr, page_addr, answer) = match opened {
            Opened::OtherOrigin => {
                let page_addr =
                    tests::http::serve(Server::new(Registry::new()).routes(page(script.clone())))
                        .await;
                let (addr, answer) = held(None, Some(format!("http://{page_addr}"))).await;
                (addr, page_addr, answer)
            }
            _ => {
                let (addr, answer) = held(Some(page(script.clone())), None).await;
                (addr, addr, answer)
            }
        };
        let chat = format!("mid-{n}");
        let body = json!({"id": chat, "trigger": "submit-message", "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello there"}]}]});
        let first = reqwest::Client::new()
            .post(format!("http://{addr}/agent/assistant/chat"))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(first.status().as_u16(), 200, "{opened:?}");
        answer.send(ModelEvent::TextStart).unwrap();
        answer.send(ModelEvent::TextDelta(FIRST.into())).unwrap();
        let mut first = first.bytes_stream();
        let mut read = String::new();
        while !read.contains(FIRST) {
            let bytes = first.next().await.unwrap().unwrap();
            read.push_str(std::str::from_utf8(&bytes).unwrap());
        }
        let first_client = match opened {
            Opened::Reload => {
                drop(first);
                None
            }
            _ => Some(tokio::spawn(async move {
                while let Some(bytes) = first.next().await {
                    read.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
                }
                read
            })),
        };

        let api = match opened {
            Opened::OtherOrigin => format!("&api=http://{addr}"),
            _ => String::new(),
        };
        let url = format!("http://{page_addr}/?chat={chat}&resume=1&until={FIRST}{REST}{api}");
        let dom = tokio::task::spawn_blocking(move || browse(&url, r#"body[data-done="1"]"#, None))
            .await
            .unwrap();
        assert!(!dom.contains(r#"class="error""#), "{opened:?}: {dom}");
        let question = dom.find(r#"class="user" data-id="u0">hello there<"#);
        let answered = dom.find(r#"class="assistant""#);
        let full = dom.find(&format!(">{FIRST}{REST}<"));
        assert!(
            question.is_some() && full.is_some() && question < answered,
            "{opened:?}: the question is not above its answer in:\n{dom}"
        );
        if let Some(first_client) = first_client {
            let read = first_client.await.unwrap();
            assert!(read.ends_with("data: [DONE]\n\n"), "{opened:?}: {read}");
        }
    }
}
