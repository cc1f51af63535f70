//! The only place the ServiceImport jobs write, and the live reads they confirm with. Each
//! write is remembered ([`OwnWrites`](crate::controller::own_writes::OwnWrites)) until the
//! views show it, so a trigger arriving before the view caught up does not write again.

use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::context::Context;
use super::decide::internal_name;
use super::error::{Error, Step};
use super::model::{ImportView, InternalView, SERVICE_IMPORT_FINALIZER};
use super::views::import_key;
use crate::api::{
    ExportedObjectReference, GROUP, InternalServiceImport, InternalServiceImportSpec,
    ServiceImport, ServiceImportStatus,
};
use crate::controller::{ApiFailure, only_uid};

impl Context {
    fn imports_in(&self, ns: &str) -> Api<ServiceImport> {
        Api::namespaced(self.member_client.clone(), ns)
    }

    /// The ServiceImport `ns/name` as the member has it now (`None`: there is none).
    pub(super) async fn read_import(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<ImportView>, Error> {
        let read = self.imports_in(ns).get_opt(name).await;
        let si = read.map_err(ApiFailure::of(
            &self.member,
            ns,
            name,
            Step::GetServiceImport,
        ))?;
        Ok(si.map(ImportView::from))
    }

    /// The InternalServiceImport `name` as the hub has it now (`ns/si`: whose reconcile asks).
    pub(super) async fn read_internal(
        &self,
        ns: &str,
        si: &str,
        name: &str,
    ) -> Result<Option<InternalView>, Error> {
        let read = self.hub.get_opt(name).await;
        let isi = read.map_err(ApiFailure::of(
            &self.member,
            ns,
            si,
            Step::GetInternalServiceImport,
        ))?;
        Ok(isi.map(InternalView::from))
    }

    /// Sets the ServiceImport's finalizers (ours added or removed), only over the version
    /// decided on (as the reference's update); returns the ServiceImport as the member answered.
    pub(super) async fn set_finalizer(
        &self,
        si: &ImportView,
        add: bool,
    ) -> Result<ImportView, Error> {
        let (ns, name) = (si.id.namespace.as_str(), si.id.name.as_str());
        let mut finalizers: Vec<&str> = si
            .finalizers
            .iter()
            .map(String::as_str)
            .filter(|f| *f != SERVICE_IMPORT_FINALIZER)
            .collect();
        let step = if add {
            finalizers.push(SERVICE_IMPORT_FINALIZER);
            Step::AddFinalizer
        } else {
            Step::RemoveFinalizer
        };
        let body = json!({"metadata": {
            "resourceVersion": si.id.resource_version,
            "finalizers": finalizers,
        }});
        let after = self
            .imports_in(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(ApiFailure::of(&self.member, ns, name, step))?;
        let after = ImportView::from(after);
        let gone = !add && after.finalizers.is_empty() && after.deleting;
        // Released and being deleted with no other finalizer: the member deletes it now.
        let kept = (!gone).then(|| after.clone());
        self.own_imports
            .wrote(import_key(ns, name), [si.id.resource_version.clone()], kept);
        Ok(after)
    }

    /// Replaces the ServiceImport's status with the hub's verdict, only over the version
    /// decided on (the reference's status update).
    pub(super) async fn write_status(
        &self,
        si: &ImportView,
        status: &ServiceImportStatus,
    ) -> Result<ImportView, Error> {
        let (ns, name) = (si.id.namespace.as_str(), si.id.name.as_str());
        let mut body = ServiceImport {
            api_version: Some(format!("{GROUP}/v1alpha1")),
            kind: Some("ServiceImport".into()),
            status: Some(status.clone()),
            ..Default::default()
        };
        body.metadata.name = Some(name.to_string());
        body.metadata.namespace = Some(ns.to_string());
        body.metadata.resource_version = si.id.resource_version.clone();
        let after = self
            .imports_in(ns)
            .replace_status(name, &PostParams::default(), &body)
            .await
            .map_err(self.on(si, Step::WriteServiceImportStatus))?;
        let after = ImportView::from(after);
        self.own_imports.wrote(
            import_key(ns, name),
            [si.id.resource_version.clone()],
            Some(after.clone()),
        );
        Ok(after)
    }

    /// Creates the InternalServiceImport of `si` with `reference`.
    pub(super) async fn create_internal(
        &self,
        si: &ImportView,
        reference: &ExportedObjectReference,
        view_rv: Option<String>,
    ) -> Result<InternalView, Error> {
        let name = internal_name(&si.id.namespace, &si.id.name);
        let mut isi = InternalServiceImport {
            api_version: Some(format!("{GROUP}/v1alpha1")),
            kind: Some("InternalServiceImport".into()),
            spec: InternalServiceImportSpec {
                service_import_reference: reference.clone(),
            },
            ..Default::default()
        };
        isi.metadata.name = Some(name.clone());
        isi.metadata.namespace = Some(self.hub_namespace.clone());
        let created = self
            .hub
            .create(&PostParams::default(), &isi)
            .await
            .map_err(self.on(si, Step::CreateInternalServiceImport))?;
        let created = InternalView::from(created);
        self.own_internals
            .wrote(name, [view_rv], Some(created.clone()));
        Ok(created)
    }

    /// Brings the InternalServiceImport `isi` of `si` to `reference`, only over the version
    /// decided on (the reference's update).
    pub(super) async fn update_internal(
        &self,
        si: &ImportView,
        isi: &InternalView,
        reference: &ExportedObjectReference,
    ) -> Result<InternalView, Error> {
        let body = json!({
            "metadata": {"resourceVersion": isi.id.resource_version},
            "spec": {"serviceImportReference": reference_patch(reference)},
        });
        let updated = self
            .hub
            .patch(&isi.id.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(self.on(si, Step::UpdateInternalServiceImport))?;
        let updated = InternalView::from(updated);
        self.own_internals.wrote(
            isi.id.name.clone(),
            [isi.id.resource_version.clone()],
            Some(updated.clone()),
        );
        Ok(updated)
    }

    /// Deletes the InternalServiceImport `isi`, only the object seen (its UID); one already
    /// gone, or whose name holds another object now, is not ours to delete. `(ns, name)`: the
    /// object whose reconcile asks.
    pub(super) async fn delete_internal(
        &self,
        isi: &InternalView,
        (ns, name): (&str, &str),
    ) -> Result<bool, Error> {
        let deleted = match self
            .hub
            .delete(&isi.id.name, &only_uid(isi.id.uid.clone()))
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => false,
            Err(e) => {
                let step = Step::DeleteInternalServiceImport;
                return Err(ApiFailure::of(&self.member, ns, name, step)(e).into());
            }
        };
        self.own_internals
            .wrote(isi.id.name.clone(), [isi.id.resource_version.clone()], None);
        Ok(deleted)
    }

    fn on(&self, si: &ImportView, step: Step) -> impl FnOnce(kube::Error) -> Error + use<> {
        let failed = ApiFailure::of(&self.member, &si.id.namespace, &si.id.name, step);
        move |e| failed(e).into()
    }
}

/// The reference as a merge patch that also removes the optional fields it does not set.
fn reference_patch(reference: &ExportedObjectReference) -> Value {
    let mut v = serde_json::to_value(reference).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        for key in ["apiVersion", "exportedSince"] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_clears_what_the_reference_no_longer_sets() {
        let patch = reference_patch(&ExportedObjectReference::default());
        assert_eq!(patch["apiVersion"], Value::Null);
        assert!(
            patch
                .as_object()
                .is_some_and(|m| m.contains_key("exportedSince"))
        );
        assert_eq!(patch["kind"], json!(""));
    }
}
