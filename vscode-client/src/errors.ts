/** What went wrong, as a message or a log line puts it. */
export function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
