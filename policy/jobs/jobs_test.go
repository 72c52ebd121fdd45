package jobs_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

func job(id string, created time.Time) *jobs.Job {
	return &jobs.Job{ID: id, Phase: "on_cancel", Target: "POST http://127.0.0.1:1/hook", Tool: "slow",
		HookDigest: "sha256:0", Event: []byte(`{"event":"cancel"}`),
		State: jobs.Pending, Created: created}
}

func open(t *testing.T, dir string) *jobs.Store {
	t.Helper()
	s, err := jobs.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ids(all []jobs.Job) []string {
	var out []string
	for _, j := range all {
		out = append(out, j.ID)
	}
	return out
}

// TestStoreKeepsJobsUntilDeleted: a job written is there until deleted;
// a store closed empty leaves no file, one closed with jobs keeps it.
func TestStoreKeepsJobsUntilDeleted(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	t0 := time.Unix(1000, 0)
	s.Put(job("b", t0.Add(time.Second)))
	s.Put(job("a", t0))
	if all, err := s.List(); err != nil || len(all) != 2 || all[0].ID != "a" {
		t.Fatalf("list: %v %v, want a then b", ids(all), err)
	}
	j, ok, err := s.Get("b")
	if !ok || err != nil || j.Tool != "slow" || string(j.Event) != `{"event":"cancel"}` {
		t.Fatalf("get b: %+v %v %v", j, ok, err)
	}
	s.Delete("a")
	s.Delete("b")
	path := s.Path()
	s.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("an empty store's file stays: %v", err)
	}
	s2 := open(t, dir)
	s2.Put(job("c", t0))
	path = s2.Path()
	s2.Close()
	if _, err := os.Stat(path); err != nil {
		t.Errorf("a store with a job lost its file: %v", err)
	}
}

// TestStoresShareADirectory: two processes' stores open side by side at
// once and keep their jobs apart; when one closes with jobs left, the
// next store opened adopts them, and its old file goes.
func TestStoresShareADirectory(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir)
	start := time.Now()
	b := open(t, dir)
	if d := time.Since(start); d > 500*time.Millisecond { // a bound, not a timing: Open's lock wait is 1 s
		t.Errorf("the second store waited %v for the first", d)
	}
	a.Put(job("a1", time.Unix(1, 0)))
	b.Put(job("b1", time.Unix(2, 0)))
	if all, _ := b.List(); len(all) != 1 || all[0].ID != "b1" {
		t.Errorf("b holds %v, want only b1", ids(all))
	}
	jobsRead, held, err := jobs.Read(dir, nil)
	if err != nil || held != 2 || len(jobsRead) != 0 {
		t.Errorf("Read beside two live stores: %v, %d held, %v; want none, 2 held", ids(jobsRead), held, err)
	}
	aPath := a.Path()
	a.Close()
	if adopted, err := b.Adopt(); err != nil || len(adopted) != 1 || adopted[0].ID != "a1" {
		t.Fatalf("b adopted %v, %v; want a1", ids(adopted), err)
	}
	if _, err := os.Stat(aPath); !os.IsNotExist(err) {
		t.Errorf("the adopted file stays: %v", err)
	}
	if all, _ := b.List(); len(all) != 2 {
		t.Errorf("b holds %v, want a1 and b1", ids(all))
	}
}

// TestEditDir: an operator's retry and drop reach the files no process
// holds, and only those.
func TestEditDir(t *testing.T) {
	dir := t.TempDir()
	live := open(t, dir)
	live.Put(job("live", time.Unix(3, 0)))
	dead := open(t, dir)
	o := job("orphan", time.Unix(1, 0))
	o.State, o.Attempts, o.LastError = jobs.Orphaned, 3, "HTTP 500"
	dead.Put(o)
	dead.Put(job("drop-me", time.Unix(2, 0)))
	dead.Close()
	held, err := jobs.EditDir(dir, func(j jobs.Job) *jobs.Job {
		switch j.ID {
		case "drop-me":
			return nil
		case "orphan":
			j.State = jobs.Pending
		}
		return &j
	}, nil)
	if err != nil || held != 1 {
		t.Fatalf("EditDir: %d held, %v; want 1 held", held, err)
	}
	all, _, _ := jobs.Read(dir, nil)
	if len(all) != 1 || all[0].ID != "orphan" || all[0].State != jobs.Pending || all[0].LastError != "HTTP 500" {
		t.Errorf("after the edit: %+v; want the orphan pending again, its history kept", all)
	}
}

const crashEnv = "JOBS_TEST_CRASH_DIR"

// TestJobSurvivesSIGKILL: a process writes a job, says so, and is killed
// with SIGKILL; the next store opened in the directory finds the job.
func TestJobSurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		s, err := jobs.Open(dir, nil)
		if err != nil {
			os.Exit(2)
		}
		s.Put(job("survivor", time.Now()))
		os.Stdout.WriteString("written\n")
		select {} // until killed
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJobSurvivesSIGKILL$")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "written\n" {
		cmd.Process.Kill()
		t.Fatalf("child said %q, %v", line, err)
	}
	cmd.Process.Kill() // SIGKILL
	cmd.Wait()
	s := open(t, dir)
	all, _ := s.List()
	if len(all) != 1 || all[0].ID != "survivor" {
		t.Fatalf("after the crash the store holds %v, want the survivor", ids(all))
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "jobs-*.db")); len(files) != 1 {
		t.Errorf("files left: %v, want the new store's only", files)
	}
}

// BenchmarkStorePut: one job written durably (each Put is a synced bbolt
// transaction): what a hook invocation costs before its first attempt.
func BenchmarkStorePut(b *testing.B) {
	s, err := jobs.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	j := job("bench", time.Now())
	for i := 0; b.Loop(); i++ {
		j.ID = "bench-" + strconv.Itoa(i)
		if err := s.Put(j); err != nil {
			b.Fatal(err)
		}
	}
}
