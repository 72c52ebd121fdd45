package transcript

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// SoakCalls is how many calls the strict-client soak makes on each
// transport.
const SoakCalls = 1000

// Soak is the strict-client soak: calls, each against a server that
// misbehaves in one of the ways strict clients (Claude Code) close their
// connection over, picked at random (seeded: every run plays the same
// transcript), with random cancels. Each call ends with exactly one
// answer or one accepted cancel, and its sync step says nothing else
// reached the client: no second answer, no progress after the answer, no
// progress under a token no request holds, no late answer or progress
// after a cancel.
func Soak(calls int) Transcript {
	rng := rand.New(rand.NewPCG(41, uint64(calls)))
	var b strings.Builder
	line := func(op, format string, args ...any) { fmt.Fprintf(&b, op+" "+format+"\n", args...) }
	counts := map[string]int{}
	for i := range calls {
		id := i + 10
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"soak","_meta":{"progressToken":"p%d"}}}`, id, id)
		answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"%d"}]}}`, id, id)
		progress := func(tok string, n int) string {
			return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"%s","progress":%d}}`, tok, n)
		}
		line("c>", "%s", call)
		line("s<", "%s", call)
		switch kind := rng.IntN(5); kind {
		case 0: // a progress reporter racing the result
			line("s>", "%s", progress(fmt.Sprintf("p%d", id), 1))
			line("c<", "%s", progress(fmt.Sprintf("p%d", id), 1))
			line("s>", "%s", answer)
			line("c<", "%s", answer)
			line("sync", "")
			line("s>", "%s", progress(fmt.Sprintf("p%d", id), 2))
			counts["silenced"]++
		case 1: // an answer twice
			line("s>", "%s", answer)
			line("c<", "%s", answer)
			line("sync", "")
			line("s>", "%s", answer)
			counts["silenced"]++
		case 2: // progress for a token nobody issued
			line("s>", "%s", progress(fmt.Sprintf("nobody%d", id), 1))
			line("s>", "%s", answer)
			line("c<", "%s", answer)
			counts["silenced"]++
		case 3: // cancelled, then the server answers and reports on
			cancel := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id)
			line("c>", "%s", cancel)
			line("s<", "%s", cancel)
			line("s>", "%s", progress(fmt.Sprintf("p%d", id), 1))
			line("s>", "%s", answer)
			line("sync", "")
			line("clock", "+1s") // the cancelled call's stream ends (http.cancel_grace)
			counts["cancels_forwarded"]++
			counts["progress_suppressed"]++
			counts["responses_suppressed"]++
		default: // a server that behaves
			line("s>", "%s", answer)
			line("c<", "%s", answer)
		}
		line("sync", "")
	}
	line("stats", "silenced=%d cancels_forwarded=%d progress_suppressed=%d responses_suppressed=%d dropped=0",
		counts["silenced"], counts["cancels_forwarded"], counts["progress_suppressed"], counts["responses_suppressed"])
	steps, err := parseSteps("strict-client-soak", b.String())
	if err != nil {
		panic(err) // the generator's own bug
	}
	return Transcript{Name: "strict-client-soak", Steps: steps, ServerCapabilities: "{}",
		Comment: "generated (Soak): a strict client's calls against a misbehaving server, with random cancels"}
}
