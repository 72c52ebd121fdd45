// Package leaktest holds what the packages' goroutine-leak checks (goleak)
// allow to outlive a test: the goroutines that live for the process by
// design. Only tests import it.
package leaktest

import "go.uber.org/goleak"

// ProcessWide are fasthttp's housekeeping goroutines (its dialer's address
// cache, the server's date clock, its clients' idle-connection cleaners,
// the servers' worker pools), which end on their own schedule or never.
// Every other goroutine a test starts must end with it.
var ProcessWide = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
}
