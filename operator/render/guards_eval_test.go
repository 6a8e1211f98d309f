package render

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// policyEval evaluates a ValidatingAdmissionPolicy's match conditions, variables and
// validations the way the kube-apiserver does (k8s.io/apiserver
// pkg/admission/plugin/policy/validating plugin.go, compilePolicy), offline. Resource rules
// and selectors are not evaluated (test/integration/operator checks them on a real
// apiserver).
type policyEval struct {
	t         *testing.T
	validator validating.Validator
}

func newPolicyEval(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) *policyEval {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	for _, v := range p.Spec.Variables {
		r := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.StoredExpressions)
		if r.Error != nil {
			t.Fatalf("%s: variable %s: %v", p.Name, v.Name, r.Error)
		}
	}
	var validations, messages []plugincel.ExpressionAccessor
	for _, v := range p.Spec.Validations {
		c := &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if r := compiler.CompileCELExpression(c, opts, environment.StoredExpressions); r.Error != nil {
			t.Fatalf("%s: validation %q: %v", p.Name, v.Expression, r.Error)
		}
		validations = append(validations, c)
		if v.MessageExpression == "" {
			messages = append(messages, nil)
			continue
		}
		m := &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		if r := compiler.CompileCELExpression(m, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions); r.Error != nil {
			t.Fatalf("%s: message %q: %v", p.Name, v.MessageExpression, r.Error)
		}
		messages = append(messages, m)
	}
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		var conds []plugincel.ExpressionAccessor
		for i := range p.Spec.MatchConditions {
			c := (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i])
			if r := compiler.CompileCELExpression(c, opts, environment.StoredExpressions); r.Error != nil {
				t.Fatalf("%s: match condition %s: %v", p.Name, c.Name, r.Error)
			}
			conds = append(conds, c)
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conds, opts, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	return &policyEval{t: t, validator: validating.NewValidator(
		compiler.CompileCondition(validations, opts, environment.StoredExpressions), matcher,
		compiler.CompileCondition(nil, opts, environment.StoredExpressions),
		compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)}
}

// request is one admission request to evaluate.
type request struct {
	op          admission.Operation
	gvr         schema.GroupVersionResource
	subresource string
	obj, old    runtime.Object
	user        user.Info
	namespace   *corev1.Namespace
}

// denial is the first refusing decision's message ("" when admitted). An evaluation error
// fails the test: with failurePolicy Fail it would refuse for the wrong reason.
func (e *policyEval) denial(r request) string {
	e.t.Helper()
	ref := r.obj
	if ref == nil {
		ref = r.old
	}
	acc, err := meta(ref)
	if err != nil {
		e.t.Fatal(err)
	}
	gvk := ref.GetObjectKind().GroupVersionKind()
	attr := admission.NewAttributesRecord(r.obj, r.old, gvk, acc.GetNamespace(), acc.GetName(), r.gvr, r.subresource, r.op, nil, false, r.user)
	va := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(r.obj), VersionedOldObject: admission.NewLazyObject(r.old)}
	res := e.validator.Validate(context.Background(), r.gvr, va, nil, r.namespace, 10_000_000, nil)
	for _, d := range res.Decisions {
		if d.Evaluation == validating.EvalError {
			e.t.Fatalf("evaluation error: %s", d.Message)
		}
		if d.Action == validating.ActionDeny {
			return d.Message
		}
	}
	return ""
}

func meta(obj runtime.Object) (metav1.Object, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

// toUnstructured turns a typed object into what the apiserver hands a policy for a custom
// resource.
func toUnstructured(t *testing.T, obj runtime.Object) runtime.Object {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func policyOf(t *testing.T, objs []client.Object, name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, o := range objs {
		if p, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok && p.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %s", name)
	return nil
}

func wantDenial(t *testing.T, what, got, want string) {
	t.Helper()
	switch {
	case want == "" && got != "":
		t.Errorf("%s: refused (%s), want admitted", what, got)
	case want != "" && got == "":
		t.Errorf("%s: admitted, want refused with %q", what, want)
	case want != "" && !strings.Contains(got, want):
		t.Errorf("%s: refused with %q, want %q", what, got, want)
	}
}
