package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"crucible.dev/crucible/internal/fleet"
	"crucible.dev/crucible/internal/metrics"
	"crucible.dev/crucible/internal/profile"
)

// ErrLeadershipLost ends a controller whose lease was taken or could not be
// renewed. Its loops have stopped by then; the process exits non-zero and
// restarts clean as a follower, as controller-runtime's managers do: a
// replica that resumed leading with the state of its last term could act on
// rows another leader has moved on since.
var ErrLeadershipLost = errors.New("leader election lost")

// leaderIdentity names this replica in the Lease: host name (the pod's name
// in a cluster) and a random suffix, so a restarted pod is a new holder.
func leaderIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "crucible"
	}
	return host + "_" + string(uuid.NewUUID())
}

// runAsLeader runs loops only while this replica holds the lease of le on the
// hub. It returns nil when parent ends (the lease released for the next
// leader), loops' error if they fail, and ErrLeadershipLost when the lease
// was lost — always after loops have returned.
func runAsLeader(parent context.Context, hub *rest.Config, le profile.LeaderElection, log *slog.Logger, loops func(context.Context) error) error {
	_, kube, err := fleet.NewClientset("hub", rest.CopyConfig(hub)) // refuses redirects, as every hub client
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	id := leaderIdentity()
	lease := le.LeaseNamespace + "/" + le.LeaseName
	ctx, stop := context.WithCancel(parent)
	defer stop()
	var (
		mu        sync.Mutex
		loopsDone chan struct{} // made when the loops start
		loopErr   error         // read after loopsDone is closed
	)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          leaseLock(kube, le, id),
		Name:          le.LeaseName,
		LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
		// A replica shutting down hands the lease over at once instead of
		// making the next leader wait out the lease.
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				// client-go starts this in a goroutine of its own, which may
				// run after Run returned (lctx then is cancelled already).
				mu.Lock()
				if lctx.Err() != nil {
					mu.Unlock()
					return
				}
				ch := make(chan struct{})
				loopsDone = ch
				mu.Unlock()
				defer close(ch)
				metrics.Leader.Set(1)
				metrics.LeaderTransitions.WithLabelValues("acquired").Inc()
				log.Info("leading: running the reconcile loops", "lease", lease, "identity", id)
				err := loops(lctx)
				metrics.Leader.Set(0)
				if lctx.Err() == nil { // the loops ended on their own: stop renewing
					loopErr = fmt.Errorf("reconcile loops ended: %w", err)
					stop()
				}
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					metrics.LeaderTransitions.WithLabelValues("lost").Inc()
					log.Error("leader lease lost: stopping the reconcile loops; exiting to restart as a follower", "lease", lease, "identity", id)
				}
			},
			OnNewLeader: func(holder string) {
				if holder != id {
					log.Info("following", "leader", holder, "lease", lease)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	metrics.Leader.Set(0)
	log.Info("waiting for the leader lease", "lease", lease, "identity", id)
	elector.Run(ctx) // returns when ctx ends or the lease is lost, cancelling the loops' context
	mu.Lock()
	ch := loopsDone
	mu.Unlock()
	if ch != nil {
		<-ch
	}
	switch {
	case loopErr != nil:
		return loopErr
	case parent.Err() != nil:
		return nil
	}
	return ErrLeadershipLost
}

// leaseLock is the Lease the replicas of one instance compete for.
func leaseLock(kube kubernetes.Interface, le profile.LeaderElection, id string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: le.LeaseName, Namespace: le.LeaseNamespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
}
