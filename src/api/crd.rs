//! CustomResourceDefinitions generated from the Rust types. The chart's `crds/` holds their YAML;
//! a test fails when it is stale and another compares them with fleet-networking's own CRDs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use super::GROUP;
use super::endpoint_slice_export::EndpointSliceExportSpec;
use super::internal_service_export::{InternalServiceExportSpec, InternalServiceExportStatus};
use super::service_export::ServiceExportStatus;

/// The ServiceExport CRD: v1alpha1 (served) and v1beta1 (served, storage), same schema.
pub fn service_export_crd() -> CustomResourceDefinition {
    let schema = root_schema(
        "ServiceExport declares that the associated Service should be exported to other clusters.",
        None,
        Some(schema_of::<ServiceExportStatus>()),
        // The export's name becomes part of the hub-side name and of label values.
        Some(
            json!([{"message": "metadata.name max length is 63", "rule": "size(self.metadata.name) < 64"}]),
        ),
    );
    let columns = vec![
        column(
            "Is-Valid",
            ".status.conditions[?(@.type=='Valid')].status",
            "string",
        ),
        column(
            "Is-Conflicted",
            ".status.conditions[?(@.type=='Conflict')].status",
            "string",
        ),
        column("Age", ".metadata.creationTimestamp", "date"),
    ];
    let version = |name: &str, storage: bool| CustomResourceDefinitionVersion {
        name: name.into(),
        served: true,
        storage,
        additional_printer_columns: Some(columns.clone()),
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema.clone()),
        }),
        subresources: Some(status_subresource()),
        ..Default::default()
    };
    crd(
        "ServiceExport",
        "serviceexports",
        Some("svcexport"),
        vec![version("v1alpha1", false), version("v1beta1", true)],
    )
}

/// The InternalServiceExport CRD (hub, v1alpha1).
pub fn internal_service_export_crd() -> CustomResourceDefinition {
    let schema = root_schema(
        "InternalServiceExport is a data transport type that member clusters in the fleet use to upload the spec of exported Service to the hub cluster.",
        Some(schema_of::<InternalServiceExportSpec>()),
        Some(schema_of::<InternalServiceExportStatus>()),
        None,
    );
    crd(
        "InternalServiceExport",
        "internalserviceexports",
        Some("internalsvcexport"),
        vec![CustomResourceDefinitionVersion {
            name: "v1alpha1".into(),
            served: true,
            storage: true,
            schema: Some(CustomResourceValidation {
                open_api_v3_schema: Some(schema),
            }),
            subresources: Some(status_subresource()),
            ..Default::default()
        }],
    )
}

/// The EndpointSliceExport CRD (hub, v1alpha1): a spec and no status (yet a status subresource,
/// as fleet-networking declares it).
pub fn endpoint_slice_export_crd() -> CustomResourceDefinition {
    let mut schema = root_schema(
        "EndpointSliceExport is a data transport type that member clusters in the fleet use to upload the spec of an EndpointSlice to the hub cluster.",
        Some(schema_of::<EndpointSliceExportSpec>()),
        None,
        None,
    );
    schema.required = Some(vec!["spec".into()]);
    crd(
        "EndpointSliceExport",
        "endpointsliceexports",
        None,
        vec![CustomResourceDefinitionVersion {
            name: "v1alpha1".into(),
            served: true,
            storage: true,
            schema: Some(CustomResourceValidation {
                open_api_v3_schema: Some(schema),
            }),
            subresources: Some(status_subresource()),
            ..Default::default()
        }],
    )
}

/// Every generated CRD with its file name under the chart's `crds/`.
pub fn crd_files() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        (
            "networking.fleet.azure.com_serviceexports.yaml",
            service_export_crd(),
        ),
        (
            "networking.fleet.azure.com_internalserviceexports.yaml",
            internal_service_export_crd(),
        ),
        (
            "networking.fleet.azure.com_endpointsliceexports.yaml",
            endpoint_slice_export_crd(),
        ),
    ]
}

/// YAML of a CRD as committed under the chart's `crds/`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::SerializeError> {
    let body = serde_saphyr::to_string(crd)?;
    Ok(format!(
        "# Generated by `fleetnet-hub crdgen` from src/api; do not edit.\n---\n{body}"
    ))
}

fn crd(
    kind: &str,
    plural: &str,
    short: Option<&str>,
    versions: Vec<CustomResourceDefinitionVersion>,
) -> CustomResourceDefinition {
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{plural}.{GROUP}")),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                categories: Some(vec!["fleet-networking".into()]),
                kind: kind.into(),
                list_kind: Some(format!("{kind}List")),
                plural: plural.into(),
                short_names: short.map(|s| vec![s.into()]),
                singular: Some(kind.to_lowercase()),
            },
            scope: "Namespaced".into(),
            versions,
            ..Default::default()
        },
        status: None,
    }
}

fn column(name: &str, path: &str, type_: &str) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.into(),
        json_path: path.into(),
        type_: type_.into(),
        ..Default::default()
    }
}

fn status_subresource() -> CustomResourceSubresources {
    CustomResourceSubresources {
        status: Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceSubresourceStatus(
            json!({}),
        )),
        scale: None,
    }
}

fn root_schema(
    description: &str,
    spec: Option<Value>,
    status: Option<Value>,
    validations: Option<Value>,
) -> JSONSchemaProps {
    let mut properties = serde_json::Map::new();
    properties.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
    properties.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
    properties.insert("metadata".into(), json!({"type": "object"}));
    let mut root = json!({"type": "object", "description": description});
    if let Some(spec) = spec {
        properties.insert("spec".into(), spec);
    }
    if let Some(status) = status {
        properties.insert("status".into(), status);
    }
    if let Some(rules) = validations {
        root["x-kubernetes-validations"] = rules;
    }
    root["properties"] = Value::Object(properties);
    // A schema built from JSON values of known shape; a failure here is a bug in this module.
    serde_json::from_value(root)
        .unwrap_or_else(|e| panic!("generated CRD schema is not a JSONSchemaProps: {e}"))
}

/// The schema of `T`, inlined and in the structural form the apiserver accepts.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    structural(&mut value);
    value
}

/// Drops what schemars adds but a structural CRD schema must not have: `null` alternatives of
/// optional fields, titles, `$schema`, and unsigned/width formats Kubernetes does not know.
fn structural(v: &mut Value) {
    let Value::Object(map) = v else {
        if let Value::Array(items) = v {
            items.iter_mut().for_each(structural);
        }
        return;
    };
    map.remove("$schema");
    map.remove("title");
    if let Some(Value::Array(types)) = map.get("type") {
        let non_null: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if non_null.len() == 1 {
            map.insert("type".into(), non_null[0].clone());
        }
    }
    if map
        .get("format")
        .is_some_and(|f| f == "uint" || f == "uint32" || f == "uint64")
    {
        map.remove("format");
    }
    // `default: null` on optional fields is schemars' way of saying "may be absent".
    if map.get("default").is_some_and(Value::is_null) {
        map.remove("default");
    }
    for child in map.values_mut() {
        structural(child);
    }
}

/// `metav1.Condition` list, keyed by type, with the validation controller-gen emits.
pub(super) fn conditions_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-map-keys": ["type"],
        "x-kubernetes-list-type": "map",
        "items": {
            "type": "object",
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {"type": "string", "format": "date-time",
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another."},
                "message": {"type": "string", "maxLength": 32768,
                    "description": "message is a human readable message indicating details about the transition."},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0,
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon."},
                "reason": {"type": "string", "maxLength": 1024, "minLength": 1,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition."},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"],
                    "description": "status of the condition, one of True, False, Unknown."},
                "type": {"type": "string", "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase."}
            }
        }
    })
}

pub(super) fn address_type_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "default": "IPv4",
        "enum": ["IPv4"],
        "description": "The type of addresses carried by this EndpointSliceExport. At this stage only IPv4 addresses are supported."
    })
}

pub(super) fn protocol_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "default": "TCP",
        "enum": ["TCP", "UDP", "SCTP"],
        "description": "The IP protocol for this port. Supports \"TCP\", \"UDP\", and \"SCTP\". Default is TCP."
    })
}

pub(super) fn int_or_string_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": true,
        "description": "The port to access on the pods targeted by the service."
    })
}

pub(super) fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
        "description": "The timestamp from a local clock when the generation of the object is exported."
    })
}
