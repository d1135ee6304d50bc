/**
 * The conversation of an openai stage, with the JSON of every message kept
 * as it is added: each request resends the whole history, and serializing
 * it from scratch every turn grows with its length. A message changed
 * after it was added must be passed to `changed`.
 */

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export class History {
  private readonly messages: ChatMessage[] = [];
  private readonly json: string[] = [];

  push(message: ChatMessage): void {
    this.messages.push(message);
    this.json.push(JSON.stringify(message));
  }

  changed(message: ChatMessage): void {
    const i = this.messages.lastIndexOf(message);
    if (i >= 0) this.json[i] = JSON.stringify(message);
  }

  get length(): number {
    return this.messages.length;
  }

  /** Byte for byte JSON.stringify of the messages. */
  toJson(): string {
    return `[${this.json.join(",")}]`;
  }
}
