// When to restart a server that crashed. No `vscode` import: tested under plain Node.

/** Restarts after crashes: waits base, 2*base, 4*base, ... for at most maxTries crashes in a
 * row; a server that ran for stableMs before crashing starts the count again. */
export class RestartBackoff {
  private crashes = 0;
  private startedAt: number | undefined;

  constructor(
    readonly maxTries = 5,
    readonly baseMs = 1000,
    readonly stableMs = 60_000,
  ) {}

  /** The server was (re)started at `now`. */
  started(now: number): void {
    this.startedAt = now;
  }

  /** The server died at `now`: the delay before restarting it, or undefined to give up. */
  crashed(now: number): number | undefined {
    if (this.startedAt !== undefined && now - this.startedAt >= this.stableMs) {
      this.crashes = 0;
    }
    this.startedAt = undefined;
    if (this.crashes >= this.maxTries) {
      return undefined;
    }
    const delay = this.baseMs * 2 ** this.crashes;
    this.crashes += 1;
    return delay;
  }

  /** A restart by the user: forget earlier crashes. */
  reset(): void {
    this.crashes = 0;
    this.startedAt = undefined;
  }

  get attempts(): number {
    return this.crashes;
  }
}
