package strict

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is a Conn whose server answers each call at once: a step of
// progress, then the answer, and nothing for a cancelled one; misbehave, if
// set, may add to what it sends after a call.
type fakeServer struct {
	queue     []map[string]any
	misbehave func(id float64, token any) []map[string]any
}

func (f *fakeServer) Send(frame string) error {
	var m struct {
		ID     any
		Method string
		Params struct {
			Meta struct{ ProgressToken any } `json:"_meta"`
		}
	}
	if err := json.Unmarshal([]byte(frame), &m); err != nil {
		return err
	}
	switch m.Method {
	case "ping":
		f.queue = append(f.queue, map[string]any{"id": m.ID})
	case "tools/call":
		id := m.ID.(float64)
		tok := m.Params.Meta.ProgressToken
		f.queue = append(f.queue, map[string]any{"method": "notifications/progress", "params": map[string]any{"progressToken": tok}},
			map[string]any{"id": id, "result": map[string]any{}})
		if f.misbehave != nil {
			f.queue = append(f.queue, f.misbehave(id, tok)...)
		}
	}
	return nil
}

func (f *fakeServer) Recv() (map[string]any, error) {
	if len(f.queue) == 0 {
		return nil, errors.New("nothing more")
	}
	m := f.queue[0]
	f.queue = f.queue[1:]
	return m, nil
}

const slowCall = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"t%d"}}}`

// TestStreamCountsRaces: a server that answers every call at once races
// every cancel, which the client counts apart and does not hold against it.
func TestStreamCountsRaces(t *testing.T) {
	got, err := Stream(&fakeServer{}, Load{Calls: 200, Window: 8, Call: slowCall, Cancels: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.Calls != 200 || got.Cancels == 0 || got.Raced == 0 || got.Accepted() < 0 {
		t.Errorf("got %v", got)
	}
}

// TestStreamCatchesStrays: each message a strict client cannot place ends
// the run with ErrStray.
func TestStreamCatchesStrays(t *testing.T) {
	for name, bad := range map[string]func(id float64, token any) []map[string]any{
		"second answer": func(id float64, _ any) []map[string]any {
			return []map[string]any{{"id": id, "result": map[string]any{}}}
		},
		"progress after answer": func(_ float64, tok any) []map[string]any {
			return []map[string]any{{"method": "notifications/progress", "params": map[string]any{"progressToken": tok}}}
		},
		"answer for no request": func(float64, any) []map[string]any { return []map[string]any{{"id": 7.0, "result": map[string]any{}}} },
		"progress for no token": func(float64, any) []map[string]any {
			return []map[string]any{{"method": "notifications/progress", "params": map[string]any{"progressToken": "x"}}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Stream(&fakeServer{misbehave: bad}, Load{Calls: 50, Window: 4, Call: slowCall, Cancels: true, Seed: 1})
			if !errors.Is(err, ErrStray) {
				t.Errorf("Stream = %v, want ErrStray", err)
			}
		})
	}
}

// TestLines reads and writes lines.
func TestLines(t *testing.T) {
	var out strings.Builder
	l := NewLines(&out, strings.NewReader(`{"id":1}`+"\n"+`not json`+"\n"))
	if err := l.Send(`{"x":1}`); err != nil || out.String() != `{"x":1}`+"\n" {
		t.Errorf("Send: %v, %q", err, out.String())
	}
	if m, err := l.Recv(); err != nil || m["id"] != 1.0 {
		t.Errorf("Recv = %v, %v", m, err)
	}
	if _, err := l.Recv(); !errors.Is(err, ErrStray) {
		t.Errorf("Recv of a line that is not JSON = %v, want ErrStray", err)
	}
	if _, err := l.Recv(); err == nil {
		t.Error("Recv after the end: no error")
	}
}
