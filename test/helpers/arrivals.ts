/**
 * Things that arrive one by one in a test (requests a fake provider
 * received, calls it answered): kept in order in `items`, and `first(match)`
 * is a promise for the first one, seen already or still to come, that
 * `match` accepts: an event to wait on, not a list to poll.
 */
export class Arrivals<T> {
  readonly items: T[] = [];
  private readonly watchers = new Set<(item: T) => void>();

  add(item: T): void {
    this.items.push(item);
    for (const w of [...this.watchers]) w(item);
  }

  first(match: (item: T) => boolean = () => true): Promise<T> {
    const seen = this.items.find(match);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve) => {
      const watch = (item: T) => {
        if (!match(item)) return;
        this.watchers.delete(watch);
        resolve(item);
      };
      this.watchers.add(watch);
    });
  }
}
