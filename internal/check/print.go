package check

import (
	"fmt"
	"io"
)

// Print writes r as a person reads it: the server, then a verdict per line
// in plain words, and under each failing line what the proxy does about it.
func Print(w io.Writer, r *Report) {
	fmt.Fprintf(w, "%s %s, protocol %s: cancelling %s %s (%d tries, cancel after %s, listening %s)\n\n",
		Printable(r.Server.Name), Printable(r.Server.Version), Printable(string(r.Server.Protocol)), r.Tool, r.Args, r.Runs, r.CancelAfter, r.Watch)
	for _, l := range r.Lines {
		mark := map[Verdict]string{Pass: "ok  ", Fail: "FAIL", Skip: "skip", Info: "    "}[l.Verdict]
		rank := ""
		if l.Verdict == Fail && l.Rank != "" {
			rank = " [" + l.Rank + "]"
		}
		fmt.Fprintf(w, "%s %-22s %s%s\n", mark, l.Check, Printable(l.Says), rank)
		if l.Verdict == Fail && l.Proxy != "" {
			fmt.Fprintf(w, "     %-22s %s\n", "", "with mcp-cancel-proxy: "+l.Proxy)
		}
	}
	fails, musts := 0, 0
	for _, l := range r.Lines {
		if l.Verdict == Fail {
			fails++
			if l.Rank == "MUST" {
				musts++
			}
		}
	}
	fmt.Fprintf(w, "\n%d of %d lines failed", fails, len(r.Lines))
	if musts > 0 {
		fmt.Fprintf(w, ", %d of them a MUST of the spec", musts)
	}
	fmt.Fprintln(w)
}
