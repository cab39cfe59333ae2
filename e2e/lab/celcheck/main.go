// celcheck for the unit tests: checks the chart's ValidatingAdmissionPolicies and bindings with
// the apiserver's own code, without an apiserver. For each object it reports
//   - errors: what a create (helm install/upgrade, kubectl apply) would be refused with: the
//     apiserver's validation of the object, which compiles every CEL expression
//     (k8s.io/kubernetes/pkg/apis/admissionregistration/validation);
//   - warnings: the type checking the controller-manager writes to a policy's
//     status.typeChecking (an unknown field of a Node, a string compared with a bool...), against
//     the built-in OpenAPI schemas (k8s.io/apiserver/.../validating.TypeChecker).
// Input on stdin: a JSON list of objects (admissionregistration.k8s.io/v1). Output on stdout: a
// JSON list, one {"kind","name","errors","warnings"} per object.
//
// With -eval, stdin is {"policies": [...], "requests": [...]} and each request (a Node write, or
// with "resource" "slurmnodepools" a SlurmNodePool write: operation, user, groups, subresource,
// object, oldObject) is run through each policy by the
// apiserver's own validator (compiled as its ValidatingAdmissionPolicy plugin compiles a policy,
// match conditions included); the output lists, per request, the policies that deny it and their
// messages, and any evaluation errors (failurePolicy Fail turns those into denials).
//
// Built by e2e/lab/build-celcheck.sh from the same modules as the lab's kube-apiserver
// (e2e/lab/k8s/go.mod).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	validating "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"
	_ "k8s.io/kubernetes/pkg/apis/admissionregistration/install"
	"k8s.io/kubernetes/pkg/apis/admissionregistration/validation"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	"k8s.io/kubernetes/pkg/generated/openapi"
)

type result struct {
	Kind     string   `json:"kind"`
	Name     string   `json:"name"`
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
}

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	if len(os.Args) > 1 && os.Args[1] == "-eval" {
		evaluate(raw)
		return
	}
	var objects []json.RawMessage
	if err := json.Unmarshal(raw, &objects); err != nil {
		fail(fmt.Errorf("stdin: a JSON list of objects: %w", err))
	}
	// Node and its subresources resolve to core/v1 Node, as the controller-manager's RESTMapper does.
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "", Version: "v1"}})
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Node"}, meta.RESTScopeRoot)
	checker := &validating.TypeChecker{
		SchemaResolver: resolver.NewDefinitionsSchemaResolver(openapi.GetOpenAPIDefinitions, k8sscheme.Scheme),
		RestMapper:     mapper,
	}
	results := []result{}
	for _, o := range objects {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(o, &head); err != nil {
			fail(err)
		}
		r := result{Kind: head.Kind, Name: head.Metadata.Name, Errors: []string{}, Warnings: []string{}}
		switch head.Kind {
		case "ValidatingAdmissionPolicy":
			var v1 admissionv1.ValidatingAdmissionPolicy
			if err := json.Unmarshal(o, &v1); err != nil {
				r.Errors = append(r.Errors, err.Error())
				break
			}
			legacyscheme.Scheme.Default(&v1) // what the apiserver does before it validates
			var internal admissionregistration.ValidatingAdmissionPolicy
			if err := legacyscheme.Scheme.Convert(&v1, &internal, nil); err != nil {
				r.Errors = append(r.Errors, err.Error())
				break
			}
			for _, e := range validation.ValidateValidatingAdmissionPolicy(&internal) {
				r.Errors = append(r.Errors, e.Error())
			}
			if len(r.Errors) == 0 {
				for _, w := range checker.Check(&v1) {
					r.Warnings = append(r.Warnings, w.FieldRef+": "+w.Warning)
				}
			}
		case "ValidatingAdmissionPolicyBinding":
			var v1 admissionv1.ValidatingAdmissionPolicyBinding
			if err := json.Unmarshal(o, &v1); err != nil {
				r.Errors = append(r.Errors, err.Error())
				break
			}
			legacyscheme.Scheme.Default(&v1)
			var internal admissionregistration.ValidatingAdmissionPolicyBinding
			if err := legacyscheme.Scheme.Convert(&v1, &internal, nil); err != nil {
				r.Errors = append(r.Errors, err.Error())
				break
			}
			for _, e := range validation.ValidateValidatingAdmissionPolicyBinding(&internal) {
				r.Errors = append(r.Errors, e.Error())
			}
		default:
			r.Errors = append(r.Errors, "not a ValidatingAdmissionPolicy or ValidatingAdmissionPolicyBinding")
		}
		results = append(results, r)
	}
	out, _ := json.Marshal(results)
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "celcheck:", err)
	os.Exit(2)
}

type request struct {
	Name        string                 `json:"name"`
	Operation   string                 `json:"operation"`
	User        string                 `json:"user"`
	Groups      []string               `json:"groups"`
	Subresource string                 `json:"subresource"`
	Resource    string                 `json:"resource"`
	Object      map[string]interface{} `json:"object"`
	OldObject   map[string]interface{} `json:"oldObject"`
}

type denial struct {
	Policy  string `json:"policy"`
	Message string `json:"message"`
	Error   bool   `json:"error"`
}

// compile is the ValidatingAdmissionPolicy plugin's compilePolicy
// (k8s.io/apiserver/pkg/admission/plugin/policy/validating/plugin.go), which is not exported.
func compile(policy *admissionv1.ValidatingAdmissionPolicy) validating.Validator {
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	expressionVars := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: false}
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, policy.Spec.FailurePolicy, err)
	}
	variables := make([]plugincel.NamedExpressionAccessor, len(policy.Spec.Variables))
	for i, v := range policy.Spec.Variables {
		variables[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(variables, optionalVars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if n := len(policy.Spec.MatchConditions); n > 0 {
		conditions := make([]plugincel.ExpressionAccessor, n)
		for i := range policy.Spec.MatchConditions {
			conditions[i] = (*matchconditions.MatchCondition)(&policy.Spec.MatchConditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions, optionalVars, environment.StoredExpressions),
			policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(nil, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, expressionVars, environment.StoredExpressions),
		policy.Spec.FailurePolicy, nil)
}

func evaluate(raw []byte) {
	var input struct {
		Policies []admissionv1.ValidatingAdmissionPolicy `json:"policies"`
		Requests []request                               `json:"requests"`
	}
	if err := json.Unmarshal(raw, &input); err != nil {
		fail(fmt.Errorf("stdin: {\"policies\": [...], \"requests\": [...]}: %w", err))
	}
	type outcome struct {
		Name    string   `json:"name"`
		Denials []denial `json:"denials"`
	}
	outcomes := []outcome{}
	for _, r := range input.Requests {
		var object, old runtime.Object
		if r.Object != nil {
			object = &unstructured.Unstructured{Object: r.Object}
		}
		if r.OldObject != nil {
			old = &unstructured.Unstructured{Object: r.OldObject}
		}
		gvk := schema.GroupVersionKind{Version: "v1", Kind: "Node"}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
		if r.Resource == "slurmnodepools" {
			gvk = schema.GroupVersionKind{Group: "slurmpool.io", Version: "v1alpha1", Kind: "SlurmNodePool"}
			gvr = schema.GroupVersionResource{Group: "slurmpool.io", Version: "v1alpha1", Resource: "slurmnodepools"}
		}
		name, _, _ := unstructured.NestedString(r.Object, "metadata", "name")
		who := &user.DefaultInfo{Name: r.User, Groups: r.Groups}
		attr := admission.NewAttributesRecord(object, old, gvk, "", name, gvr, r.Subresource, admission.Operation(r.Operation), nil, false, who)
		versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(object), VersionedOldObject: admission.NewLazyObject(old)}
		o := outcome{Name: r.Name, Denials: []denial{}}
		for i := range input.Policies {
			policy := &input.Policies[i]
			result := compile(policy).Validate(context.Background(), gvr, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
			for _, d := range result.Decisions {
				if d.Action == validating.ActionDeny {
					o.Denials = append(o.Denials, denial{Policy: policy.Name, Message: d.Message, Error: d.Evaluation == validating.EvalError})
				}
			}
		}
		outcomes = append(outcomes, o)
	}
	out, _ := json.Marshal(outcomes)
	fmt.Println(string(out))
}
