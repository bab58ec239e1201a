package devstack

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// createObject creates one of the typed RBAC objects render emits.
func createObject(ctx context.Context, c *Cluster, obj runtime.Object) error {
	rbac := c.Client.RbacV1()
	var err error
	switch o := obj.(type) {
	case *rbacv1.Role:
		_, err = rbac.Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = rbac.RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = rbac.ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = rbac.ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	default:
		return fmt.Errorf("devstack cannot create %T", obj)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
