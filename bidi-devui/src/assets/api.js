// Talking to the server. The page lives at `{server}/dev/`: the server's own routes are one
// level up (`../actions`), the Dev UI's JSON is `api/…`. Errors are the server's JSON error
// body, `{"error": {"status", "message", "details": {"code", "path"}}}`, thrown as ApiError.

/** A refusal of the server (or a failure to reach it). */
export class ApiError extends Error {
  constructor(status, code, message, path) {
    super(message);
    this.status = status;
    this.code = code;
    this.path = path;
  }
}

/** The URL of a path relative to the page. */
export function url(path) {
  return new URL(path, document.baseURI).href;
}

/** The WebSocket URL of the server's route `path` (relative to the page). */
export function wsUrl(path) {
  const target = new URL(path, document.baseURI);
  target.protocol = target.protocol === 'https:' ? 'wss:' : 'ws:';
  return target.href;
}

/** The error a failed response carries. */
async function refusal(response) {
  const text = await response.text().catch(() => '');
  try {
    const { error } = JSON.parse(text);
    return new ApiError(response.status, error?.details?.code, error?.message ?? text, error?.details?.path);
  } catch {
    return new ApiError(response.status, `http_${response.status}`, text || response.statusText);
  }
}

/** GETs `path` as JSON. */
export async function getJson(path) {
  let response;
  try {
    response = await fetch(url(path), { headers: { accept: 'application/json' } });
  } catch (error) {
    throw new ApiError(0, 'unreachable', `the server cannot be reached: ${error.message}`);
  }
  if (!response.ok) throw await refusal(response);
  return response.json();
}

/** POSTs `body` as JSON and answers the JSON of the server's `{"result": ..}` answer. */
export async function postJson(path, body) {
  let response;
  try {
    response = await fetch(url(path), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
    });
  } catch (error) {
    throw new ApiError(0, 'unreachable', `the server cannot be reached: ${error.message}`);
  }
  if (!response.ok) throw await refusal(response);
  return response.json();
}

/**
 * Reads the answer to a request of `path` as server-sent events: a POST of `body` (JSON), or a
 * GET without one. Calls `onEvent(name, data)` for each event (`data` parsed as JSON, or the
 * text when it is not JSON), after `onResponse(response)` once its head is in. Resolves once
 * the stream ends: `true`, or `false` when the server had no stream to give (204). Rejects
 * with an ApiError when the server refuses the request, or with an AbortError when `signal`
 * aborts it.
 */
export async function readEvents(path, { body, onEvent, onResponse, signal }) {
  const init = body === undefined
    ? { headers: { accept: 'text/event-stream' }, signal }
    : { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream' }, body: JSON.stringify(body), signal };
  const response = await fetch(url(path), init);
  if (!response.ok) throw await refusal(response);
  if (response.status === 204) return false;
  if (!response.body) throw new ApiError(response.status, 'no_body', 'the answer has no body');
  onResponse?.(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const record = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      dispatch(record, onEvent);
    }
  }
  if (buffer.trim()) dispatch(buffer, onEvent);
  return true;
}

/** One SSE record: its `event:` name (default `message`) and its `data:` lines, as JSON. */
function dispatch(record, onEvent) {
  let name = 'message';
  const data = [];
  for (const line of record.split('\n')) {
    if (line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') name = value;
    if (field === 'data') data.push(value);
  }
  if (data.length === 0) return;
  let parsed;
  try {
    parsed = JSON.parse(data.join('\n'));
  } catch {
    parsed = data.join('\n');
  }
  onEvent(name, parsed);
}

/** Percent-encodes one path segment. */
export const seg = encodeURIComponent;
