package check

import (
	"encoding/json"
	"slices"
	"time"
)

// Verdict is how a line of the report came out.
type Verdict string

// The verdicts.
const (
	Pass Verdict = "pass" // the server did what the specification asks
	Fail Verdict = "fail" // it did not (Rank says how strongly it asks)
	Skip Verdict = "skip" // the line could not be checked (Says why)
	Info Verdict = "info" // a measurement, not a judgement
)

// Line is one line of the report.
type Line struct {
	// Check names what was checked: "cancel", "late-answer",
	// "progress-after-cancel", "silence", "race", "cancel-finished",
	// "cancel-unknown", "cancel-initialize", "task-cancel",
	// "http-cancel-status".
	Check   string  `json:"check"`
	Verdict Verdict `json:"verdict"`
	// Rank is "MUST" or "SHOULD": how the specification asks for what
	// failed. Empty on lines that passed.
	Rank string `json:"rank,omitempty"`
	// Says is what the server did, in plain words.
	Says string `json:"says"`
	// Proxy is what mcp-cancel-proxy does about a failing line.
	Proxy string `json:"proxy,omitempty"`
}

// Report is what Run found.
type Report struct {
	Server      Server          `json:"server"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"arguments,omitempty"`
	Runs        int             `json:"runs"`
	CancelAfter time.Duration   `json:"cancelAfterNs"`
	Watch       time.Duration   `json:"watchNs"`
	Lines       []Line          `json:"lines"`
	// Silence is the time from each cancel to the server's last message
	// about its call (zero when nothing came), over the runs that were
	// cancelled before they answered.
	Silence []time.Duration `json:"silenceNs,omitempty"`
}

// BrokeMust reports whether a line failed a MUST of the specification.
func (r *Report) BrokeMust() bool {
	return slices.ContainsFunc(r.Lines, func(l Line) bool { return l.Verdict == Fail && l.Rank == "MUST" })
}

func (r *Report) add(l Line) { r.Lines = append(r.Lines, l) }

// median and longest of ds (zero for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}

func longest(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}
