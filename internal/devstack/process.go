package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// process is one binary the stack started. It is ended by its PID only.
type process struct {
	Name    string
	LogFile string
	path    string
	args    []string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	ended   atomic.Bool // the stack stopped or killed it (not a crash)
	// started is when this process (not its name's first one) began: an
	// agent started before its API server was restarted lost its watches to
	// that restart (restartStaleAgents).
	started time.Time
	// ready is the check it was started with, which a restart waits on
	// again; nil for a process nothing waited on.
	ready func(context.Context) error
}

// ErrProcessExited is returned when a process dies before it became ready.
var ErrProcessExited = errors.New("process exited")

// startProcess starts path with args, its output appended to logFile. The
// process gets its own session so that a Ctrl-C in the terminal reaches only
// crucible, which then stops everything in order. Unless detached, the process
// is also killed if crucible itself dies.
func startProcess(name, path string, args []string, logFile string, detached bool) (*process, error) {
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	defer log.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = processEnv(name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{Name: name, LogFile: logFile, path: path, args: args, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) PID() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls check until it succeeds, the process dies, or timeout passes.
// A failure carries the tail of the process's log, which is where the reason is.
func (p *process) waitReady(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s %w (%w) while starting; last lines of %s:\n%s", p.Name, ErrProcessExited, p.waitErr, p.LogFile, LogTail(p.LogFile, 20))
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w; last lines of %s:\n%s", p.Name, timeout, last, p.LogFile, LogTail(p.LogFile, 20))
		case <-p.done:
		case <-tick.C:
		}
	}
}

// stop ends the process: SIGTERM, then SIGKILL if it has not gone after its
// grace (stopGraceOf).
func (p *process) stop() {
	grace := stopGraceOf(p.Name)
	if p.exited() {
		return
	}
	p.ended.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a paused process (PauseProcess) handles SIGTERM only once continued
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stopPID ends a process started by an earlier, detached `crucible dev up`.
// It only signals a PID whose command line still mentions marker (the stack's
// directory), so a PID reused by an unrelated process is never touched.
func stopPID(pid int, marker string, grace time.Duration) (bool, error) {
	if !pidMatches(pid, marker) {
		return false, nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("signal pid %d: %w", pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !pidMatches(pid, marker) {
			return true, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return true, fmt.Errorf("kill pid %d: %w", pid, err)
	}
	for i := 0; i < 100 && pidMatches(pid, marker); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if pidMatches(pid, marker) {
		return true, fmt.Errorf("pid %d still running after SIGKILL", pid)
	}
	return true, nil
}

// pidMatches reports whether pid is alive (not a zombie) and its command line
// contains marker.
func pidMatches(pid int, marker string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(cmdline) == 0 { // gone, or a zombie
		return false
	}
	return bytes.Contains(cmdline, []byte(marker))
}

// LogTail returns the last n lines of a file, indented, for error messages
// and a failed test's output.
func LogTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
