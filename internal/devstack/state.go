package devstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// stateFile records a running stack's processes so that `crucible dev down`,
// a different process, can stop them by PID.
const stateFile = "stack.json"

// EnvFile is the shell file, in the stack's directory, with its addresses.
const EnvFile = "env"

type state struct {
	Dir       string         `json:"dir"`
	Started   time.Time      `json:"started"`
	Processes []stateProcess `json:"processes"`
}

type stateProcess struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

func (s *Stack) writeState() error {
	st := state{Dir: s.Dir, Started: time.Now().UTC()}
	for _, p := range s.procs {
		st.Processes = append(st.Processes, stateProcess{Name: p.Name, PID: p.PID()})
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, stateFile), data, 0o644); err != nil {
		return fmt.Errorf("write stack state: %w", err)
	}
	return os.WriteFile(filepath.Join(s.Dir, EnvFile), []byte(s.Env()), 0o644)
}

// Env renders the env file: `source DIR/env` and every address of the stack is
// in the shell.
func (s *Stack) Env() string {
	vars := map[string]string{
		"CRUCIBLE_DEV_DIR": s.Dir,
		"CRUCIBLE_DEV_CA":  s.CAFile,
		"ETCD_URL":         s.EtcdURL,
		"HUB_KUBECONFIG":   s.Hub.KubeconfigFile,
		"HUB_SERVER":       s.Hub.Server,
	}
	if f := s.Federation; f != nil {
		vars["CRUCIBLE_API"] = f.ControllerInternalURL
		vars["CRUCIBLE_EXTERNAL"] = f.ControllerExternalURL
	}
	for _, c := range s.Spokes {
		v := EnvName(c.Name)
		if f := s.Federation; f != nil {
			vars[v+"_WEBHOOK"] = f.WebhookURLs[c.Name]
		}
		vars[v+"_KUBECONFIG"] = c.KubeconfigFile
		vars[v+"_SERVER"] = c.Server
		vars[v+"_POD_LOGS"] = filepath.Join(s.Dir, "pods", c.Name)
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# crucible dev stack: source this file. Stop the stack with: crucible dev down --dir " + shellQuote(s.Dir) + "\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(vars[k]))
	}
	return b.String()
}

// EnvName is the upper-case variable prefix for a cluster name: wharf → WHARF,
// gpu-east → GPU_EAST.
func EnvName(cluster string) string {
	return strings.ToUpper(strings.ReplaceAll(cluster, "-", "_"))
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ErrNoStack is returned by StopDir for a directory without a stack record.
var ErrNoStack = errors.New("no dev stack recorded")

// RunningIn reports the processes of a stack recorded in dir that are still
// alive.
func RunningIn(dir string) ([]string, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	var alive []string
	for _, p := range st.Processes {
		if pidMatches(p.PID, st.Dir) {
			alive = append(alive, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
		}
	}
	return alive, nil
}

// StopDir stops the processes of a detached stack recorded in dir, node agents
// and API servers before etcd, and deletes etcd's data. Kubeconfigs and logs
// stay for inspection. It returns the names of the processes it stopped.
func StopDir(dir string, progress func(string, ...any)) ([]string, error) {
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if progress == nil {
		progress = func(string, ...any) {}
	}
	sort.SliceStable(st.Processes, func(i, j int) bool { return stopRank(st.Processes[i].Name) < stopRank(st.Processes[j].Name) })
	var stopped []string
	var errs []error
	for _, p := range st.Processes {
		ok, err := stopPID(p.PID, st.Dir, stopGrace)
		if err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", p.Name, err))
			continue
		}
		if ok {
			stopped = append(stopped, p.Name)
			progress("stopped %s (pid %d)", p.Name, p.PID)
		}
	}
	if len(errs) > 0 {
		return stopped, errors.Join(errs...)
	}
	if err := os.RemoveAll(filepath.Join(st.Dir, "etcd")); err != nil {
		return stopped, err
	}
	return stopped, os.Remove(filepath.Join(st.Dir, stateFile))
}

func readState(dir string) (state, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return state{}, fmt.Errorf("%w in %s (no %s)", ErrNoStack, dir, stateFile)
	}
	if err != nil {
		return state{}, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return state{}, fmt.Errorf("read %s: %w", filepath.Join(dir, stateFile), err)
	}
	if st.Dir == "" {
		return state{}, fmt.Errorf("read %s: no dir recorded", filepath.Join(dir, stateFile))
	}
	return st, nil
}
