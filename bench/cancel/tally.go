//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tally is one front's figures at one concurrency.
type tally struct {
	calls, cancels, forwarded int
	forward, note, accept     []int64 // nanoseconds
	free                      []int64
	unfreed                   int  // cancelled calls whose stream had not ended by the settle's end
	frees                     bool // the client has a stream per call
	accepted                  int  // cancels the proxy's events feed says it accepted (-1: no feed)
	raced, failures           int
	errors                    int
	took                      time.Duration
}

// tally reads the calls lo..hi-1 and the proxy's events feed.
func (s *session) tally(lo, hi int64) tally {
	var acc map[int64]int64
	if s.events != nil {
		acc = s.events.accepted()
	}
	t := tally{frees: s.front.client == "http" || s.front.client == "modern", accepted: -1}
	if acc != nil {
		t.accepted = 0
	}
	r := s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := lo; id < hi; id++ {
		c := r.calls[id]
		if c == nil {
			continue
		}
		t.calls++
		if n, ok := r.notifies[id]; ok && c.notifyAt != 0 {
			t.note = append(t.note, n-c.notifyAt)
		}
		if c.cancelAt == 0 {
			continue
		}
		t.cancels++
		if got, ok := r.cancels[id]; ok {
			t.forwarded++
			t.forward = append(t.forward, got-c.cancelAt)
		}
		if t.frees {
			if c.endAt != 0 {
				t.free = append(t.free, c.endAt-c.cancelAt)
			} else {
				t.unfreed++
			}
		}
		at, ok := acc[id]
		if ok {
			t.accepted++
			t.accept = append(t.accept, at-c.cancelAt)
		}
		for _, m := range c.after {
			// A failure: the server wrote it after it read the cancel, or
			// after the proxy accepted it; else it raced the cancel.
			if m.late || ok && m.sent > at {
				t.failures++
			} else {
				t.raced++
			}
		}
	}
	return t
}

func header() string {
	return fmt.Sprintf("%-19s %-13s %4s %6s %6s %6s | %21s | %21s | %5s | %21s | %21s | %6s %6s %8s %6s %6s\n",
		"transport", "front", "conc", "calls", "cncls", "fwded", "forward p50/p99/max", "note p50/p99/max", "ratio",
		"accept p50/p99/max", "free p50/p99/max", "unfreed", "raced", "failures", "errors", "secs")
}

// line prints t: microseconds, as p50/p99/max; "-" where a figure does not
// apply or nothing was measured.
func (t tally) line(transport, front string, conc int) string {
	ratio := "-"
	if len(t.forward) > 0 && len(t.note) > 0 {
		ratio = fmt.Sprintf("%.2f", float64(pct(t.forward, 50))/float64(max(pct(t.note, 50), 1)))
	}
	unfreed := "-"
	if t.frees {
		unfreed = strconv.Itoa(t.unfreed)
	}
	failures := strconv.Itoa(t.failures)
	if t.accepted < 0 && front != "direct" {
		failures += "*" // judged by the server's marks alone: no events feed
	}
	return fmt.Sprintf("%-19s %-13s %4d %6d %6d %6d | %21s | %21s | %5s | %21s | %21s | %6s %6d %8s %6d %6.1f\n",
		transport, front, conc, t.calls, t.cancels, t.forwarded, spread(t.forward), spread(t.note), ratio,
		spread(t.accept), spreadIf(t.free, t.frees), unfreed, t.raced, failures, t.errors, t.took.Seconds())
}

func spreadIf(v []int64, applies bool) string {
	if !applies {
		return "-"
	}
	return spread(v)
}

// spread is p50/p99/max in microseconds.
func spread(v []int64) string {
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	us := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e3, 'f', 0, 64) }
	return us(pct(v, 50)) + "/" + us(pct(v, 99)) + "/" + us(v[len(v)-1])
}

// pct is the p-th percentile of sorted v.
func pct(v []int64, p int) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[(len(v)-1)*p/100]
}

// feed reads the proxy's events feed.
type feed struct {
	path string
}

// accepted returns, per request id, when the proxy accepted its cancel.
func (f *feed) accepted() map[int64]int64 {
	out := map[int64]int64{}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"cancel_accepted"`)) {
			continue
		}
		var e struct {
			Time string          `json:"time"`
			ID   json.RawMessage `json:"id"`
		}
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, e.Time)
		id, err2 := strconv.ParseInt(strings.Trim(string(e.ID), `"`), 10, 64)
		if err == nil && err2 == nil {
			out[id] = t.UnixNano()
		}
	}
	return out
}
