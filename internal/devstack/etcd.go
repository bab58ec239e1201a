package devstack

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
)

// startEtcd runs the one etcd that every API server of the stack shares, each
// under its own key prefix. fsync is off: the data is thrown away anyway.
func (s *Stack) startEtcd(ctx context.Context) error {
	ports, err := s.freePorts(2)
	if err != nil {
		return err
	}
	s.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	args := []string{
		"--name=devstack",
		"--data-dir=" + filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls=" + s.EtcdURL,
		"--advertise-client-urls=" + s.EtcdURL,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=devstack=" + peer,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
		"--quota-backend-bytes=8589934592",
	}
	p, err := s.start("etcd", s.opts.Tools.Etcd(), args)
	if err != nil {
		return err
	}
	err = p.waitReady(ctx, startTimeout, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.EtcdURL+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.opts.Progress("etcd ready at %s", s.EtcdURL)
	return nil
}
