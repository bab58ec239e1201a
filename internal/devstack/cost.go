package devstack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// What a stack costs in memory, per spoke and for the parts the spokes
// share, so that `dev up` can say what one more spoke takes and a benchmark
// can report it.

// spokeProcesses are the prefixes of the processes the stack runs for each
// spoke; a process is the spoke's if its name is one of them followed by
// the spoke's name.
var spokeProcesses = []string{"kube-apiserver-", "kube-scheduler-", "kube-controller-manager-", "kwok-", "crucible-webhook-"}

// Cost is the memory of one spoke's processes, or of the shared ones.
type Cost struct {
	// Spoke names the spoke; "" for the parts every spoke shares: etcd, the
	// hub's kube-apiserver, the controller and any other process the stack
	// started.
	Spoke     string
	Processes []ProcessCost
	// Guests are the spokes that share this spoke's API server
	// (Options.SpokesPerServer), whose processes these are too.
	Guests []string
}

// ProcessCost is one process of the stack.
type ProcessCost struct {
	Name string
	PID  int
	// RSS is the resident set size in bytes (VmRSS); 0 once Exited.
	RSS int64
	// Anon is the anonymous part of RSS (RssAnon: heap and stacks), what
	// one more copy of the process adds: the rest of RSS is mostly the
	// binary's pages, which every process of the same binary shares.
	Anon int64
	// Exited: the process is gone (it crashed, or was killed or stopped).
	Exited bool
}

// RSS sums the resident sets of c's processes.
func (c Cost) RSS() int64 {
	var sum int64
	for _, p := range c.Processes {
		sum += p.RSS
	}
	return sum
}

// Anon sums the anonymous memory of c's processes.
func (c Cost) Anon() int64 {
	var sum int64
	for _, p := range c.Processes {
		sum += p.Anon
	}
	return sum
}

// Costs returns the resident memory of the stack's processes: one Cost per
// spoke that runs an API server, in the order of Spokes (a guest's cost is
// its host's, which names it), then the shared parts. A process that has
// exited is reported as such, with no memory. An attached stack's dev
// runtime and token writer run in the caller's process and are not counted.
func (s *Stack) Costs() ([]Cost, error) {
	owner := map[string]int{}
	servers := s.servers()
	costs := make([]Cost, len(servers)+1)
	for i, c := range servers {
		costs[i].Spoke, costs[i].Guests = c.Name, s.guestsOf(c.Name)
		for _, prefix := range spokeProcesses {
			owner[prefix+c.Name] = i
		}
	}
	for _, p := range s.procs {
		pc := ProcessCost{Name: p.Name, PID: p.PID(), Exited: p.exited()}
		if !pc.Exited {
			m, err := readMemory(pc.PID)
			switch {
			case errors.Is(err, errGone):
				pc.Exited = true
			case err != nil:
				return nil, fmt.Errorf("memory of %s: %w", p.Name, err)
			}
			pc.RSS, pc.Anon = m.rss, m.anon
		}
		i, ok := owner[p.Name]
		if !ok {
			i = len(servers)
		}
		costs[i].Processes = append(costs[i].Processes, pc)
	}
	return costs, nil
}

// errGone: the process has ended between the check and the read (or is a
// zombie, which has no memory left).
var errGone = errors.New("process gone")

// memory is a process's resident set and its anonymous part, in bytes.
type memory struct{ rss, anon int64 }

// readMemory reads pid's VmRSS and RssAnon from /proc/<pid>/status.
func readMemory(pid int) (memory, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return memory{}, errGone
	}
	if err != nil {
		return memory{}, err
	}
	m, err := parseStatus(data)
	if err != nil && !errors.Is(err, errGone) {
		return memory{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, err
}

// parseStatus reads the VmRSS and RssAnon lines of a /proc/<pid>/status
// ("VmRSS:    1234 kB"). A status without VmRSS is a zombie's.
func parseStatus(status []byte) (memory, error) {
	var m memory
	var haveRSS bool
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, value, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(key) {
		case "VmRSS":
			dst, haveRSS = &m.rss, true
		case "RssAnon":
			dst = &m.anon
		default:
			continue
		}
		fields := bytes.Fields(value)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return memory{}, fmt.Errorf("unexpected %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil || kb < 0 {
			return memory{}, fmt.Errorf("%s %q is no size in kB", key, fields[0])
		}
		*dst = kb * 1024
	}
	if !haveRSS {
		return memory{}, errGone
	}
	return m, nil
}
