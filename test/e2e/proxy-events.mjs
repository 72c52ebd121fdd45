// The proxy's events: the log lines on its stderr that carry an "event"
// field (docs/events.md), and a way to wait for a count of matching ones.
// onLine, if given, sees every line (a wrapped server's own among them).
export function proxyEvents(stderr, onLine = () => {}) {
  const seen = [];
  let wake = () => {};
  let buf = '';
  stderr.on('data', (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      onLine(line);
      try {
        const ev = JSON.parse(line);
        if (ev.event) seen.push(ev);
      } catch { /* not a JSON line */ }
      wake();
    }
  });
  const matching = (match) => seen.filter(match).length;
  return {
    seen,
    matching,
    async waitFor(match, count = 1) {
      for (;;) {
        if (matching(match) >= count) return;
        await new Promise((resolve) => { wake = resolve; });
      }
    },
  };
}
