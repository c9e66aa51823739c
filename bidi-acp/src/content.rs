//! Content blocks both ways: a prompt's blocks as the user message the agent reads, and the
//! attachments of messages and tool results as the blocks a client shows.

use agent_client_protocol_schema::v1::{
    AudioContent, BlobResourceContents, Content, ContentBlock, ContentChunk, EmbeddedResource,
    EmbeddedResourceResource, Error, ImageContent, TextContent, TextResourceContents,
    ToolCallContent,
};
use bidi_llm::{Attachment, UserMessage};

use crate::codec;

/// The user message a prompt makes: its text blocks, and its resource links as Markdown links,
/// make the text, one block a line; its images, audio and embedded resources are attachments.
pub(crate) fn user_message(prompt: &[ContentBlock]) -> Result<UserMessage, Error> {
    let mut text = String::new();
    let mut attachments = Vec::new();
    let line = |text: &mut String, line: &str| {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(line);
    };
    for (index, block) in prompt.iter().enumerate() {
        let refuse = |reason: &str| codec::invalid_params(&format!("prompt[{index}]"), reason);
        match block {
            ContentBlock::Text(block) => line(&mut text, &block.text),
            ContentBlock::ResourceLink(link) => {
                line(&mut text, &format!("[{}]({})", link.name, link.uri));
            }
            ContentBlock::Image(image) => {
                if image.mime_type.is_empty() {
                    return Err(refuse("an image needs its mimeType"));
                }
                let mut attachment = Attachment::image(&image.data, &image.mime_type);
                if let (Attachment::Image { uri, .. }, Some(link)) = (&mut attachment, &image.uri) {
                    *uri = Some(link.clone());
                }
                attachments.push(attachment);
            }
            ContentBlock::Audio(audio) => {
                if audio.mime_type.is_empty() {
                    return Err(refuse("audio needs its mimeType"));
                }
                attachments.push(Attachment::audio(&audio.data, &audio.mime_type));
            }
            ContentBlock::Resource(embedded) => attachments.push(match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(resource) => {
                    let mut attachment = Attachment::text_resource(&resource.uri, &resource.text);
                    if let Attachment::Resource { mime_type, .. } = &mut attachment {
                        mime_type.clone_from(&resource.mime_type);
                    }
                    attachment
                }
                EmbeddedResourceResource::BlobResourceContents(resource) => {
                    Attachment::blob_resource(
                        &resource.uri,
                        &resource.blob,
                        resource
                            .mime_type
                            .as_deref()
                            .unwrap_or("application/octet-stream"),
                    )
                }
                _ => return Err(refuse("this kind of embedded resource is not supported")),
            }),
            _ => return Err(refuse("this kind of content is not supported")),
        }
    }
    Ok(UserMessage::new(text).attachments(attachments))
}

/// The block that shows an attachment.
pub(crate) fn block(attachment: &Attachment) -> Option<ContentBlock> {
    Some(match attachment {
        Attachment::Image {
            data,
            mime_type,
            uri,
        } => ContentBlock::Image(ImageContent::new(data, mime_type).uri(uri.clone())),
        Attachment::Audio { data, mime_type } => {
            ContentBlock::Audio(AudioContent::new(data, mime_type))
        }
        Attachment::Resource {
            uri,
            mime_type,
            text,
            blob,
        } => {
            let resource = match (text, blob) {
                (_, Some(blob)) => EmbeddedResourceResource::BlobResourceContents(
                    BlobResourceContents::new(blob, uri).mime_type(mime_type.clone()),
                ),
                (text, None) => EmbeddedResourceResource::TextResourceContents(
                    TextResourceContents::new(text.clone().unwrap_or_default(), uri)
                        .mime_type(mime_type.clone()),
                ),
            };
            ContentBlock::Resource(EmbeddedResource::new(resource))
        }
        _ => return None,
    })
}

pub(crate) fn text_block(text: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text))
}

/// A text chunk of a message.
pub(crate) fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(text_block(text))
}

/// What a user message shows as, chunk by chunk: its text, then its attachments.
pub(crate) fn user_chunks(message: &UserMessage) -> Vec<ContentChunk> {
    let text = (!message.content.is_empty()).then(|| text_block(&message.content));
    text.into_iter()
        .chain(message.attachments.iter().filter_map(block))
        .map(ContentChunk::new)
        .collect()
}

/// A tool call's content: its text output, then its attachments.
pub(crate) fn tool_content(output: &str, attachments: &[Attachment]) -> Vec<ToolCallContent> {
    std::iter::once(text_block(output))
        .chain(attachments.iter().filter_map(block))
        .map(|block| ToolCallContent::Content(Content::new(block)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn blocks(value: Value) -> Vec<ContentBlock> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_prompt_makes_text_and_attachments_and_they_show_as_they_came() {
        let prompt = blocks(json!([
            {"type": "text", "text": "what is in these?"},
            {"type": "resource_link", "uri": "file:///a/README.md", "name": "README.md"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo=", "uri": "file:///a/logo.png"},
            {"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="},
            {"type": "resource", "resource": {"uri": "file:///a/main.rs", "mimeType": "text/x-rust", "text": "fn main() {}"}},
            {"type": "resource", "resource": {"uri": "file:///a/data.bin", "blob": "AAEC"}},
        ]));
        let message = user_message(&prompt).unwrap();
        assert_eq!(
            message.content,
            "what is in these?\n[README.md](file:///a/README.md)"
        );
        assert_eq!(
            serde_json::to_value(&message.attachments).unwrap(),
            json!([
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "uri": "file:///a/logo.png"},
                {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
                {"type": "resource", "uri": "file:///a/main.rs", "mimeType": "text/x-rust", "text": "fn main() {}"},
                {"type": "resource", "uri": "file:///a/data.bin", "mimeType": "application/octet-stream", "blob": "AAEC"},
            ])
        );
        // Replayed: the text, then every attachment as the block it came as.
        let chunks: Vec<Value> = user_chunks(&message)
            .into_iter()
            .map(|chunk| serde_json::to_value(chunk.content).unwrap())
            .collect();
        assert_eq!(chunks.len(), 5);
        assert_eq!(chunks[1], prompt[2].clone().serde());
        assert_eq!(chunks[2], prompt[3].clone().serde());
        assert_eq!(chunks[3], prompt[4].clone().serde());
        assert_eq!(chunks[4]["resource"]["blob"], "AAEC");
    }

    trait Serde {
        fn serde(self) -> Value;
    }

    impl Serde for ContentBlock {
        fn serde(self) -> Value {
            serde_json::to_value(self).unwrap()
        }
    }

    #[test]
    fn a_block_without_what_it_needs_is_refused_by_its_index() {
        let prompt = blocks(json!([
            {"type": "text", "text": "see"},
            {"type": "image", "mimeType": "", "data": "AAAA"},
        ]));
        let error = user_message(&prompt).unwrap_err();
        assert_eq!(i32::from(error.code), -32602);
        assert_eq!(error.data.unwrap()["path"], "prompt[1]");
    }
}
