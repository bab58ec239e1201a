package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"crucible.dev/crucible/internal/benchreport"
	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/devstack/devstacktest"
)

// The runlive benchmark's sizes.
const (
	runLiveBulkBytes    = 64 << 20 // one round trip of the throughput measure
	runLiveRounds       = 3        // throughput rounds per path, alternating
	runLiveEchoBytes    = 1 << 10  // one latency sample
	runLiveEchoes       = 1000     // latency samples per path and round
	runLiveIdleSessions = 100      // [run_live] max_sessions_per_identity's default
)

// BenchmarkRunLive (issue 24): throughput and 1-KiB echo round trips
// through crucible's relay (`crucible port-forward`: the CLI's WebSocket to
// the controller, the controller's port-forward stream to the spoke)
// against `kubectl port-forward` straight to the spoke as the controller's
// own federated identity (the same token, by `crucible credential`), to
// the same echo pod, alternating round by round on the same stack; then the
// controller's RSS holding runLiveIdleSessions idle sessions. Both paths
// end in the same dev runtime's port-forward and the same Perl echo, so the
// ratio is the relay's cost. It reports; it never fails on a figure.
func BenchmarkRunLive(b *testing.B) {
	// One caller opens the rounds' sessions and then runLiveIdleSessions
	// more within a minute: past [run_live] opens_per_minute's default.
	s := devstacktest.Start(b, devstack.Options{Crucible: devstacktest.CrucibleBinary(b), RunLiveOpensPerMinute: 10 * runLiveIdleSessions})
	wp := echoPod(b, s, "wharf")
	waitEchoing(b, s, wp.ID)
	spoke := s.Spoke("wharf")
	relay := startPortForward(b, s, "port-forward", wp.ID, ":7777")
	kc := credentialKubeconfig(b, s, spoke, s.Federation.SpokeTokenFiles[spoke.Name])
	direct := startForwarder(b, exec.Command(devstack.FindTools().Kubectl(), "--kubeconfig", kc, "-n", devstack.SpokeNamespace,
		"port-forward", "pod/"+wp.ID, ":7777", "--address", "127.0.0.1"))

	b.ResetTimer()
	forwards := [2]*forwardCmd{relay, direct}
	var paths [2]runLivePath
	for round := range runLiveRounds {
		order := []int{0, 1}
		if round%2 == 1 { // alternate which path goes first
			order = []int{1, 0}
		}
		for _, i := range order {
			paths[i].measure(b, forwards[i])
		}
	}
	pid := s.Processes()["crucible-controller"]
	before := rssMiB(b, pid)
	idle := holdSessions(b, relay, runLiveIdleSessions)
	time.Sleep(2 * time.Second) // let the controller's goroutines settle
	held := rssMiB(b, pid)
	idle.close()
	b.StopTimer()

	crucible, kubectl := paths[0].result(), paths[1].result()
	b.Logf("relay:   %.1f MB/s (rounds %v), 1 KiB echo p50 %.2f ms p99 %.2f ms", crucible.mbps, paths[0].mbps, ms(crucible.p50), ms(crucible.p99))
	b.Logf("kubectl: %.1f MB/s (rounds %v), 1 KiB echo p50 %.2f ms p99 %.2f ms", kubectl.mbps, paths[1].mbps, ms(kubectl.p50), ms(kubectl.p99))
	b.Logf("controller RSS %.0f MiB before, %.0f MiB with %d idle sessions (%.0f KiB each)", before, held, runLiveIdleSessions, (held-before)*1024/runLiveIdleSessions)
	b.ReportMetric(crucible.mbps, "relay-MB/s")
	b.ReportMetric(kubectl.mbps, "kubectl-MB/s")
	b.ReportMetric(ms(crucible.p99), "relay-p99-ms")
	b.ReportMetric(ms(kubectl.p99), "kubectl-p99-ms")
	b.ReportMetric(held, "rss-100-idle-MiB")

	method := fmt.Sprintf("one echo pod on wharf (Perl, in its own network namespace); crucible port-forward (WebSocket to the controller, "+
		"port-forward to the spoke with the cluster's federated identity) vs kubectl port-forward straight to the spoke with the same "+
		"identity (crucible credential); throughput: %d MiB sent and echoed back on one connection, median of %d rounds per path, "+
		"alternating; latency: %d sequential %d-byte echoes per round; RSS: /proc of the controller before and with %d idle "+
		"sessions through crucible port-forward; kube-apiserver %s", runLiveBulkBytes>>20, runLiveRounds, runLiveEchoes,
		runLiveEchoBytes, runLiveIdleSessions, devstack.KubernetesVersion)
	const baseline = "kubectl port-forward, same identity and pod"
	records := []benchreport.Record{
		benchreport.Record{ID: "runlive", Case: "throughput, 64 MiB echoed", Unit: "MB/s", Value: crucible.mbps,
			Goal: "≥ 0.8× kubectl port-forward", Method: method,
			Extra: map[string]float64{"relay_min_mbps": slices.Min(paths[0].mbps), "kubectl_min_mbps": slices.Min(paths[1].mbps)},
		}.WithBaseline(baseline, kubectl.mbps),
		benchreport.Record{ID: "runlive", Case: "1 KiB echo round trip, p99", Unit: "ms", Value: ms(crucible.p99), LowerIsBetter: true,
			Goal: "p99 ≤ 1.5× kubectl port-forward", Method: method,
			Extra: map[string]float64{"relay_p50_ms": ms(crucible.p50), "kubectl_p50_ms": ms(kubectl.p50), "samples": float64(len(paths[0].echoes))},
		}.WithBaseline(baseline, ms(kubectl.p99)),
		{ID: "runlive", Case: "controller RSS, 100 idle sessions", Unit: "MiB", Value: held, LowerIsBetter: true, Goal: "report", Method: method,
			Extra: map[string]float64{"rss_before_mib": before, "kib_per_session": (held - before) * 1024 / runLiveIdleSessions}},
	}
	records[0] = records[0].Judged(crucible.mbps >= 0.8*kubectl.mbps)
	records[1] = records[1].Judged(crucible.p99 <= kubectl.p99*3/2)
	for _, r := range records {
		if err := benchreport.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}

// runLivePath gathers one path's samples over the rounds.
type runLivePath struct {
	mbps   []float64
	echoes []time.Duration
}

// measure runs one round on a fresh connection through f: the bulk round
// trip, then the echoes.
func (p *runLivePath) measure(b *testing.B, f *forwardCmd) {
	b.Helper()
	c, r, _ := f.connect(b)
	defer c.Close()
	start := time.Now()
	if err := roundTrip(c, r, runLiveBulkBytes); err != nil {
		b.Fatalf("%s: %v", f.cmd.Args[0], err)
	}
	p.mbps = append(p.mbps, runLiveBulkBytes/time.Since(start).Seconds()/1e6)
	out, in := make([]byte, runLiveEchoBytes), make([]byte, runLiveEchoBytes)
	for i := range out {
		out[i] = byte('a' + i%26)
	}
	for range runLiveEchoes {
		t0 := time.Now()
		if _, err := c.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(r, in); err != nil {
			b.Fatal(err)
		}
		p.echoes = append(p.echoes, time.Since(t0))
	}
}

// runLiveResult is a path's median throughput and echo percentiles.
type runLiveResult struct {
	mbps     float64
	p50, p99 time.Duration
}

func (p *runLivePath) result() runLiveResult {
	mbps := slices.Sorted(slices.Values(p.mbps))
	echoes := slices.Clone(p.echoes)
	r := runLiveResult{mbps: mbps[len(mbps)/2], p99: p99(echoes)} // p99 sorts
	r.p50 = echoes[len(echoes)/2]
	return r
}

// idleSessions are connections through a forward that read their banner
// and then sit.
type idleSessions struct {
	mu    sync.Mutex
	conns []net.Conn
}

// holdSessions opens n sessions through f concurrently and returns once
// every one has its banner: each is then a relay session the controller
// holds, a WebSocket and a port-forward stream.
func holdSessions(b *testing.B, f *forwardCmd, n int) *idleSessions {
	b.Helper()
	is := &idleSessions{}
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				errs <- err
				return
			}
			is.mu.Lock()
			is.conns = append(is.conns, c)
			is.mu.Unlock()
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			if banner, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				errs <- fmt.Errorf("banner %q: %w", banner, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		is.close()
		b.Fatalf("%d idle sessions: %v (and %d more failed)", n, err, len(errs))
	}
	return is
}

func (is *idleSessions) close() {
	for _, c := range is.conns {
		c.Close()
	}
}
