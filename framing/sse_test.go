package framing_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

type sseWant struct {
	raw, data, id, typ string
	hasData, hasID     bool
	retry              int
}

func readEvents(t testing.TB, in string, max int) ([]sseWant, int) {
	r := framing.NewSSEReader(strings.NewReader(in), max)
	var got []sseWant
	tooLarge := 0
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return got, tooLarge
		}
		if errors.Is(err, framing.ErrEventTooLarge) {
			tooLarge++
			continue
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		w := sseWant{raw: string(ev.Raw), data: string(ev.Data), id: string(ev.ID), typ: string(ev.Type),
			hasData: ev.HasData, hasID: ev.HasID, retry: -1}
		if ev.HasRetry {
			w.retry = ev.Retry
		}
		got = append(got, w)
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []sseWant
	}{
		{"one message", "event: message\nid: 7\ndata: {\"a\":1}\n\n",
			[]sseWant{{raw: "event: message\nid: 7\ndata: {\"a\":1}\n\n", data: `{"a":1}`, id: "7", typ: "message", hasData: true, hasID: true, retry: -1}}},
		{"crlf and multi-line data", "data:a\r\ndata: b\r\n\r\n",
			[]sseWant{{raw: "data:a\r\ndata: b\r\n\r\n", data: "a\nb", hasData: true, retry: -1}}},
		{"priming event: id, empty data, retry", "id: s1-0\ndata:\nretry: 500\n\n",
			[]sseWant{{raw: "id: s1-0\ndata:\nretry: 500\n\n", id: "s1-0", hasID: true, hasData: true, retry: 500}}},
		{"comment keep-alive", ": ping\n\n", []sseWant{{raw: ": ping\n\n", retry: -1}}},
		{"two events", "data: 1\n\ndata: 2\n\n", []sseWant{
			{raw: "data: 1\n\n", data: "1", hasData: true, retry: -1},
			{raw: "data: 2\n\n", data: "2", hasData: true, retry: -1}}},
		{"last event without blank line", "data: x\n", []sseWant{{raw: "data: x\n", data: "x", hasData: true, retry: -1}}},
		{"bom and bad retry", "\xef\xbb\xbfretry: 1x\ndata: y\n\n", []sseWant{{raw: "retry: 1x\ndata: y\n\n", data: "y", hasData: true, retry: -1}}},
		{"field without colon", "data\n\n", []sseWant{{raw: "data\n\n", hasData: true, retry: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := readEvents(t, tt.in, 0)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("event %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestSSEReaderTooLarge(t *testing.T) {
	in := "data: " + strings.Repeat("x", 200<<10) + "\n\ndata: ok\n\n"
	got, tooLarge := readEvents(t, in, 100<<10)
	if tooLarge != 1 || len(got) != 1 || got[0].data != "ok" {
		t.Errorf("got %d too large and %+v; want 1 and the event after it", tooLarge, got)
	}
}

func TestAppendSSEMessage(t *testing.T) {
	ev := framing.AppendSSEMessage(nil, "3", []byte(`{"jsonrpc":"2.0","method":"x"}`))
	got, _ := readEvents(t, string(ev), 0)
	if len(got) != 1 || got[0].data != `{"jsonrpc":"2.0","method":"x"}` || got[0].id != "3" {
		t.Errorf("round trip = %+v", got)
	}
}

// FuzzSSEReader: whatever the bytes, the events' Raw fields put back
// together are the stream (less a leading BOM), and the events are those a
// plain reading of the WHATWG rules gives (lines end in CRLF, LF or a lone
// CR), the reference below; unlike a browser, the reader also returns a
// last event that the stream ended without a blank line.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("event: message\nid: 1\ndata: {}\n\n: ping\n\ndata: a\r\ndata: b\r\n\r\n"))
	f.Add([]byte("data\n\n\n\nid\x00x: 1\nretry: 10\ndata:"))
	f.Add([]byte(": x\rdata: {late}\r\r\n\n"))
	f.Add([]byte("data: a\r\rdata: b\r\n\r\ndata: c\n\r"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := framing.NewSSEReader(bytes.NewReader(in), 0)
		var all []byte
		var got []sseWant
		for {
			ev, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ev.Raw...)
			if ev.HasData || ev.HasID || len(ev.Type) > 0 {
				got = append(got, sseWant{data: string(ev.Data), id: string(ev.ID), typ: string(ev.Type), hasData: ev.HasData, hasID: ev.HasID})
			}
		}
		if want := bytes.TrimPrefix(in, []byte("\xef\xbb\xbf")); !bytes.Equal(all, want) {
			t.Fatalf("events put back together = %q, want %q", all, want)
		}
		if want := referenceEvents(bytes.TrimPrefix(in, []byte("\xef\xbb\xbf"))); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: events %+v, want %+v", in, got, want)
		}
	})
}

// referenceEvents parses an event stream by the WHATWG's rules, line by
// line, keeping for each event its data, id and type fields.
func referenceEvents(in []byte) []sseWant {
	s := strings.ReplaceAll(strings.ReplaceAll(string(in), "\r\n", "\n"), "\r", "\n")
	var out []sseWant
	var cur sseWant
	var data []string
	flush := func() {
		if len(data) > 0 {
			cur.data, cur.hasData = strings.Join(data, "\n"), true
		}
		if cur.hasData || cur.hasID || cur.typ != "" {
			out = append(out, cur)
		}
		cur, data = sseWant{}, nil
	}
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			flush()
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "data":
			data = append(data, value)
		case "id":
			if !strings.Contains(value, "\x00") {
				cur.id, cur.hasID = value, true
			}
		case "event":
			cur.typ = value
		}
	}
	flush() // the reader returns a last event without its blank line
	return out
}

// TestBudgetBoundsLargeEvents: readers sharing a Budget hold large events
// only while it lasts; a reader past it gets ErrBudgetSpent, and what a
// reader held is given back at its next event or on Release (issue 8,
// item 13).
func TestBudgetBoundsLargeEvents(t *testing.T) {
	big := "data: " + strings.Repeat("x", 100<<10) + "\n\n"
	b := framing.NewBudget(160 << 10) // two large events' worth, not three
	readers := make([]*framing.SSEReader, 3)
	for i := range readers {
		readers[i] = framing.NewSSEReader(strings.NewReader(big+"data: small\n\n"), 0)
		readers[i].SetBudget(b)
	}
	for i, r := range readers[:2] {
		if _, err := r.Next(); err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	if _, err := readers[2].Next(); !errors.Is(err, framing.ErrBudgetSpent) {
		t.Fatalf("third reader: %v, want ErrBudgetSpent (used %d)", err, b.Used())
	}
	if ev, err := readers[0].Next(); err != nil || string(ev.Data) != "small" {
		t.Fatalf("first reader's next event: %v", err)
	}
	readers[1].Release()
	if b.Used() != 0 {
		t.Errorf("budget used %d after every reader let go, want 0", b.Used())
	}
}
