package apiauth

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// reviewTimeout bounds one review; past it the request is answered 503.
const reviewTimeout = 10 * time.Second

// Hub sends TokenReviews and SubjectAccessReviews to the hub's API server
// with the controller's own identity, which needs create on
// authentication.k8s.io tokenreviews and authorization.k8s.io
// subjectaccessreviews (crucible render hub prints that ClusterRole). The
// controller makes one Hub per kind of review, each on a clientset with its
// own client-side rate limit ([api] token_review_qps, access_review_qps): a
// review that cannot get a token from it before reviewTimeout fails as an
// unanswered one (ErrUnavailable, 503), never as a refusal.
type Hub struct {
	Client kubernetes.Interface
}

var (
	_ TokenReviewer  = Hub{}
	_ AccessReviewer = Hub{}
)

// ReviewToken creates a TokenReview for the hub's own audiences.
func (h Hub) ReviewToken(ctx context.Context, token string) (authenticationv1.TokenReviewStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := h.Client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, fmt.Errorf("create tokenreview: %w", err)
	}
	return tr.Status, nil
}

// ReviewAccess creates a SubjectAccessReview.
func (h Hub) ReviewAccess(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := h.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx,
		&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, fmt.Errorf("create subjectaccessreview: %w", err)
	}
	return sar.Status, nil
}
