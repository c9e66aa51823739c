// A React page on the AI SDK's `useChat` that restores a conversation from a bidi server and
// goes on with it, for a headless browser. Built into one script by `build.mjs`.
//
// The page reads `?chat=<id>&prompt=<text>`: it fetches `GET /agent/assistant/chat/<id>` (the
// stored chat as `UIMessage[]`), hands it to `useChat({ messages })`, shows every message,
// sends `prompt` on the same chat, and sets `data-done` on <body> once the answer is in.

import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useEffect, useRef } from 'react';
import { createRoot } from 'react-dom/client';

const params = new URLSearchParams(location.search);
const chatId = params.get('chat');
const prompt = params.get('prompt');

function text(message) {
  return message.parts
    .filter((part) => part.type === 'text')
    .map((part) => part.text)
    .join('');
}

function Chat({ restored }) {
  const { messages, sendMessage, status, error } = useChat({
    id: chatId,
    messages: restored,
    transport: new DefaultChatTransport({ api: '/agent/assistant/chat' }),
  });
  const sent = useRef(false);
  useEffect(() => {
    if (!sent.current && prompt) {
      sent.current = true;
      sendMessage({ text: prompt });
    }
  }, [sendMessage]);
  const done = sent.current && status === 'ready' && messages.at(-1)?.role === 'assistant';
  useEffect(() => {
    if (done || error) document.body.dataset.done = '1';
  }, [done, error]);
  return (
    <ol>
      {messages.map((message) => (
        <li key={message.id} className={message.role} data-id={message.id}>
          {text(message)}
        </li>
      ))}
      {error ? <li className="error">{String(error)}</li> : null}
    </ol>
  );
}

const restored = await (await fetch(`/agent/assistant/chat/${encodeURIComponent(chatId)}`)).json();
createRoot(document.getElementById('root')).render(<Chat restored={restored} />);
