package closewatch

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// pipeTCP returns the two ends of a loopback TCP connection.
func pipeTCP(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// TestWatchCloseSeesTheHangUp: of many watched connections, exactly the
// ones whose peers close are reported, data from a live peer is not taken
// for a close and is left unread, and a stopped watch never fires.
func TestWatchCloseSeesTheHangUp(t *testing.T) {
	tm := time.AfterFunc(20*time.Second, func() { panic("TestWatchCloseSeesTheHangUp hung") })
	defer tm.Stop()
	const n = 50
	var wr Watcher
	defer wr.Stop()
	fired := make(chan int, n)
	servers, clients, stops := make([]net.Conn, n), make([]net.Conn, n), make([]func(), n)
	for i := range n {
		servers[i], clients[i] = pipeTCP(t)
		stops[i] = wr.Watch(servers[i], func() { fired <- i })
	}
	for i := 0; i < n; i += 2 {
		clients[i].Close() // the even ones hang up
	}
	clients[1].Write([]byte("x")) // an odd one talks
	stops[3]()
	clients[3].Close() // and one hangs up after its watch was stopped
	seen := map[int]bool{}
	for range n / 2 {
		i := <-fired
		if i%2 != 0 || seen[i] {
			t.Fatalf("watch %d fired (seen before: %v)", i, seen[i])
		}
		seen[i] = true
	}
	for i := range n {
		stops[i]()
	}
	select {
	case i := <-fired:
		t.Errorf("watch %d fired after every peer that hung up was reported", i)
	default:
	}
	var b [1]byte
	if k, err := servers[1].Read(b[:]); k != 1 || b[0] != 'x' {
		t.Errorf("the live peer's byte: %q, %v", b[:k], err)
	}
}

// TestWatchSeesAnEarlierHangUp: a peer that hung up before the watch
// began is reported (the kernel keeps the hang-up), and a watch stopped
// before its peer hangs up reports nothing.
func TestWatchSeesAnEarlierHangUp(t *testing.T) {
	tm := time.AfterFunc(20*time.Second, func() { panic("TestWatchSeesAnEarlierHangUp hung") })
	defer tm.Stop()
	early, earlyPeer := pipeTCP(t)
	stopped, stoppedPeer := pipeTCP(t)
	fired := make(chan string, 2)
	var wr Watcher
	defer wr.Stop()
	earlyPeer.Close() // before the watch begins
	stopEarly := wr.Watch(early, func() { fired <- "early" })
	defer stopEarly()
	stop := wr.Watch(stopped, func() { fired <- "stopped" })
	stop()
	stoppedPeer.Close()
	if got := <-fired; got != "early" {
		t.Fatalf("%s fired, want early", got)
	}
	// A third watch, begun after the stopped one's peer hung up, fires:
	// the watcher has looked at the kernel's events since, and the stopped
	// watch, unregistered, had none.
	last, lastPeer := pipeTCP(t)
	lastPeer.Close()
	stopLast := wr.Watch(last, func() { fired <- "last" })
	defer stopLast()
	if got := <-fired; got != "last" {
		t.Errorf("%s fired, want last", got)
	}
}

// TestWatcherStops: stop waits for an onClose that is running and ends the
// watcher's goroutine; a watch after it is a no-op that never fires, and
// the watches' own stops, called after it, are harmless.
func TestWatcherStops(t *testing.T) {
	tm := time.AfterFunc(20*time.Second, func() { panic("TestWatcherStops hung") })
	defer tm.Stop()
	var wr Watcher
	server, client := pipeTCP(t)
	running, release := make(chan struct{}), make(chan struct{})
	var ended atomic.Bool
	stopFirst := wr.Watch(server, func() {
		close(running)
		<-release
		time.Sleep(10 * time.Millisecond) // a slow onClose: stop must still wait for it
		ended.Store(true)
	})
	client.Close()
	<-running
	stopped := make(chan struct{})
	go func() {
		wr.Stop()
		close(stopped)
	}()
	close(release)
	<-stopped
	if !ended.Load() {
		t.Fatal("stop returned before the onClose it waited for ended")
	}
	stopFirst()
	late, latePeer := pipeTCP(t)
	stopLate := wr.Watch(late, func() { t.Error("a watch begun after stop fired") })
	latePeer.Close()
	stopLate()
	wr.Stop()
	select {
	case <-wr.looped:
	default:
		t.Fatal("the watcher's loop still runs")
	}
}
