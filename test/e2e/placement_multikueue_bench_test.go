//go:build interop

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"crucible.dev/crucible/internal/devstack"
	"crucible.dev/crucible/internal/placement/placementtest"
)

// BenchmarkPlacementMultiKueue runs BenchmarkPlacementQuality's stream,
// beside the same tenant's load, through Kueue's MultiKueue (as make
// interop builds it): each pod a Job on the hub's LocalQueue, whose
// ClusterQueue holds the fleet's GPUs and dispatches through crucible's
// federation to the spokes, each with a ClusterQueue holding its own GPUs.
// Its occupancy and waits are set against the same oracle, reported beside
// crucible's placement.
func BenchmarkPlacementMultiKueue(b *testing.B) {
	spokes := qualitySpokes()
	gpus := map[string]int{}
	total := 0
	for _, p := range qualityPools {
		gpus[p.Spoke] += p.Nodes * p.GPUs
		total += p.Nodes * p.GPUs
	}
	quota := func(n int) kueueQuota { return kueueQuota{cpu: "1000", memory: "1000Gi", gpus: strconv.Itoa(n)} }
	f := startMultiKueueOn(b, spokes, nil, quota(total), func(w string) kueueQuota { return quota(gpus[w]) })
	s := f.s
	q := newQualityStream(b, s, spokes)
	cfg := *s.Hub.Admin
	cfg.QPS, cfg.Burst = -1, -1
	hub, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	clock := watchPodClock(b, s, spokes, mkNamespace, func(p *corev1.Pod) string { return p.Labels[batchv1.JobNameLabel] })
	b.ResetTimer()
	for range b.N {
		runs := runStream(b, s, clock, "mk", q.jobs, func(ctx context.Context, i int, j placementtest.Job) (string, error) {
			job := gpuJob(fmt.Sprintf("pq-%03d", i), j)
			_, err := hub.BatchV1().Jobs(mkNamespace).Create(ctx, job, metav1.CreateOptions{})
			return job.Name, err
		})
		mk := q.measure(b, runs)
		logFigures(b, map[string]qualityFigures{"multikueue": mk, "oracle": q.oracle})
		occ, meanWait := qualityRows("placement-multikueue", "Kueue MultiKueue (reported)", mk, q.oracle,
			qualityMethod(q.spec, "submitted as Jobs to the hub's LocalQueue (Kueue "+devstack.KueueVersion+" MultiKueue through crucible's federation; "+
				"the hub's ClusterQueue holding the fleet's GPUs, each spoke's its own)"))
		appendRows(b, withReport(occ), withReport(meanWait))
	}
}

// gpuJob is a stream job as a batch Job on the hub's LocalQueue: one pod
// asking j.GPUs GPUs, tolerating the GPU taint, sleeping j.Duration.
func gpuJob(name string, j placementtest.Job) *batchv1.Job {
	zero := int32(0)
	gpus := *resource.NewQuantity(int64(j.GPUs), resource.DecimalSI)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: mkNamespace, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "lq"}},
		Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Command: []string{"sleep", strconv.Itoa(int(j.Duration.Seconds()))},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"), devstack.ResourceGPU: gpus},
					Limits:   corev1.ResourceList{devstack.ResourceGPU: gpus},
				}}},
			Tolerations: []corev1.Toleration{{Key: devstack.GPUTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		}}},
	}
}
