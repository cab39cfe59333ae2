// celcheck for the unit tests: checks the chart's ValidatingAdmissionPolicies and bindings with
// the apiserver's own code, without an apiserver. For each object it reports
//   - errors: what a create (helm install/upgrade, kubectl apply) would be refused with: the
//     apiserver's validation of the object, which compiles every CEL expression
//     (k8s.io/kubernetes/pkg/apis/admissionregistration/validation);
//   - warnings: the type checking the controller-manager writes to a policy's
//     status.typeChecking (an unknown field of a Node, a string compared with a bool...), against
//     the built-in OpenAPI schemas (k8s.io/apiserver/.../validating.TypeChecker).
// Input on stdin: a JSON list of objects (admissionregistration.k8s.io/v1). Output on stdout: a
// JSON list, one {"kind","name","errors","warnings"} per object. Built by e2e/lab/build-celcheck.sh
// from the same modules as the lab's kube-apiserver (e2e/lab/k8s/go.mod).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	validating "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
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
