/**
 * The lines of a byte stream as they arrive (UTF-8, split on LF; a last
 * line without LF is not yielded), in batches: every complete line of one
 * chunk at once, so a consumer sees all of them before anything awaiting
 * the first one resumes.
 */
export async function* streamLines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string[]> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of stream) {
    buf += decoder.decode(chunk, { stream: true });
    const end = buf.lastIndexOf("\n");
    if (end < 0) continue;
    const lines = buf.slice(0, end).split("\n");
    buf = buf.slice(end + 1);
    yield lines;
  }
}
