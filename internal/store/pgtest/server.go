package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	startTimeout = 60 * time.Second
	stopTimeout  = 15 * time.Second
	portAttempts = 3
)

// Server is one running throwaway PostgreSQL server.
type Server struct {
	dir  string // temporary root: data/, sock/, postgres.log
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the postgres process has exited
	// bin and cred are how the server was started, for Resume.
	bin  string
	cred *syscall.Credential
}

// DSN returns the URL of database db on the server (user postgres, trust
// authentication, loopback TCP).
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, db)
}

// Start initialises a cluster in a new temporary directory and starts a
// server on it. The caller must Stop it.
func Start(ctx context.Context) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "crucible-pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, cred: cred}
	if err := s.initdb(ctx, bin, cred); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err == nil {
			err = s.start(ctx, port)
		}
		if err == nil {
			return s, nil
		}
		// Another process may have taken the port between our probe and
		// postgres binding it; try a fresh one.
		if attempt == portAttempts || ctx.Err() != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
	}
}

// credential returns who to run the server as: as root, the postgres OS
// user (PostgreSQL refuses root); otherwise the current user (nil).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root needs the postgres OS user: %w", ErrNoBinaries, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user ids: %w", err)
	}
	// Groups nil: drop root's supplementary groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// command builds a server-side command run as cred, killed if the test
// binary dies first.
func (s *Server) command(ctx context.Context, cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = s.dir // the caller's cwd may be unreadable to the postgres user
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (s *Server) initdb(ctx context.Context, bin string, cred *syscall.Credential) error {
	sock := filepath.Join(s.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if cred != nil {
		for _, p := range []string{s.dir, sock} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("hand %s to the postgres user: %w", p, err)
			}
		}
	}
	cmd := s.command(ctx, cred, filepath.Join(bin, "initdb"),
		"-D", filepath.Join(s.dir, "data"), "-U", "postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return nil
}

// start runs postgres on loopback port and waits until it accepts
// connections. Durability against a machine crash is traded for speed
// (fsync off: the data is thrown away), but not against a crash of the
// server: a commit is written to the WAL before it is acknowledged
// (synchronous_commit stays on), so a halted and resumed server has every
// committed row, as a real one restarted under load must.
func (s *Server) start(ctx context.Context, port int) error {
	logPath := filepath.Join(s.dir, "postgres.log")
	// Appended: a resumed server's log follows the halted one's.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own copy
	// Not CommandContext's ctx: the server must outlive Start's context.
	cmd := s.command(context.WithoutCancel(ctx), s.cred, filepath.Join(s.bin, "postgres"),
		"-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(port),
		"-k", filepath.Join(s.dir, "sock"),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.cmd, s.port, s.done = cmd, port, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)

	if err := s.waitReady(ctx); err != nil {
		_ = s.kill()
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("postgres on port %d: %w\n%s", port, err, tail(log, 2000))
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	db, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err = db.PingContext(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("exited during startup: %s", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Stop shuts the server down immediately (SIGQUIT to the postmaster this
// package started, as `pg_ctl stop -m immediate` would; SIGKILL if it
// lingers) and removes its directory.
func (s *Server) Stop() error {
	return errors.Join(s.kill(), os.RemoveAll(s.dir))
}

// Halt stops the server as a crash would (SIGQUIT to the postmaster: an
// immediate shutdown, no checkpoint) and keeps its data, so that Resume can
// start it again: clients see their connections cut and new ones refused
// meanwhile, as during a database restart or failover.
func (s *Server) Halt() error {
	return s.kill()
}

// Resume starts a halted server again on the same port and data (PostgreSQL
// runs crash recovery), so DSNs handed out before stay valid, and waits
// until it accepts connections.
func (s *Server) Resume(ctx context.Context) error {
	select {
	case <-s.done:
	default:
		return fmt.Errorf("resume postgres: %d still runs", s.cmd.Process.Pid)
	}
	return s.start(ctx, s.port)
}

func (s *Server) kill() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGQUIT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal postgres %d: %w", s.cmd.Process.Pid, err)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("postgres %d ignored SIGQUIT for %s; killed", s.cmd.Process.Pid, stopTimeout)
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// globVersions returns the paths matching pattern, newest PostgreSQL major
// version first (the version is the path element after "postgresql/").
func globVersions(pattern string) ([]string, error) {
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	version := func(p string) int {
		_, rest, _ := strings.Cut(p, "/postgresql/")
		v, _, _ := strings.Cut(rest, "/")
		n, _ := strconv.Atoi(v)
		return n
	}
	sort.Slice(paths, func(i, j int) bool { return version(paths[i]) > version(paths[j]) })
	return paths, nil
}

func dirOf(p string) string { return filepath.Dir(p) }

func tail(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}
