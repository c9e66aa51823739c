// A React page on the AI SDK's `useChat` that restores a conversation from a bidi server and
// goes on with it, for a headless browser. Built into one script by `build.mjs`.
//
// The page reads `?chat=<id>&prompt=<text>`: it fetches `GET /agent/assistant/chat/<id>` (the
// stored chat as `UIMessage[]`), hands it to `useChat({ messages })`, shows every message,
// sends `prompt` on the same chat, and sets `data-done` on <body> once the answer is in.
//
// With `&resume=1` it follows the README's reload recipe instead: the stored chat, then
// `useChat({ messages, resume: true })`, which reads the answer still streaming
// (`GET .../chat/<id>/stream`); once that answer shows, it posts `<api>/release` (the test's
// route that lets the model finish), and it is done when the answer ends with `until`.
// `&api=<origin>` calls a server of another origin (CORS).

import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { useEffect, useRef } from 'react';
import { createRoot } from 'react-dom/client';

const params = new URLSearchParams(location.search);
const chatId = params.get('chat');
const prompt = params.get('prompt');
const resume = params.get('resume') === '1';
const until = params.get('until') ?? '';
const api = params.get('api') ?? '';

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
    resume,
    transport: new DefaultChatTransport({ api: `${api}/agent/assistant/chat` }),
  });
  const sent = useRef(false);
  useEffect(() => {
    if (!sent.current && prompt) {
      sent.current = true;
      sendMessage({ text: prompt });
    }
  }, [sendMessage]);
  const last = messages.at(-1);
  const released = useRef(false);
  useEffect(() => {
    if (resume && !released.current && last?.role === 'assistant' && text(last) !== '') {
      released.current = true;
      fetch(`${api}/release`, { method: 'POST' });
    }
  }, [last]);
  const done = resume
    ? status === 'ready' && last?.role === 'assistant' && text(last).endsWith(until)
    : sent.current && status === 'ready' && last?.role === 'assistant';
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

const restored = await (await fetch(`${api}/agent/assistant/chat/${encodeURIComponent(chatId)}`)).json();
createRoot(document.getElementById('root')).render(<Chat restored={restored} />);
