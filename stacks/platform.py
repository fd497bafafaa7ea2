"""The optional platform stack (``-c benchctl:platform=new|existing``): everything a campaign needs on the
cluster, in the plan's installation order, as code: base resources (namespace, StorageClass, the HF token)
-> GPU device plugins -> monitoring -> Dynamo -> model weights on EFS. docs/howto/aws-empty-account.md.

* ``new``: a VPC (two AZs, private subnets behind one NAT gateway; or the given ``vpc_id``/``subnet_ids``),
  an EKS cluster named ``benchctl:cluster_name`` at :data:`KUBERNETES_VERSION` with API authentication
  (access entries only), its control-plane logs on. Capacity (``benchctl:platform_capacity``):
  ``nodegroups``: one managed node group per ``benchctl:nodegroups`` name (its instance type from
  ``benchctl:gpu_instance_types``; the EKS accelerated AL2023 NVIDIA AMI; a launch template with every EFA
  interface the type has, in a cluster placement group, one subnet; 0 nodes until a campaign scales it, at
  most ``ceilings.max_nodes_per_pool``) plus a CPU node group (``benchctl:cpu_instance_type``, one node)
  for the platform's pods and the load Jobs, and the rehearsal's CPU node group (0 nodes until the rehearsal
  scales it; :mod:`stacks.platform_nodes`); or ``auto-mode``: EKS Auto Mode with its built-in ``system``
  and ``general-purpose`` NodePools and ``default`` NodeClass (the campaign creates its own GPU NodePools
  of that NodeClass per pool, ``benchctl.aws.k8s``), which brings the NVIDIA and EFA device plugins and
  the Pod Identity Agent itself.
  ``benchctl:gpu_capacity`` (:mod:`stacks.platform_nodes`) places GPU groups by subnet or zone and buys them
  On-Demand, from a targeted ODCR or from a Capacity Block. A zone is a name the stack cannot look up (it is
  environment-agnostic: ``Fn::GetAZs`` is resolved at deploy), so a new VPC is made in the zones named (plus,
  when one is named, a second zone that differs from it, chosen at deploy) and each zone's subnet is known; a
  given VPC's subnets are named by id. On Auto Mode a reservation becomes the NodeClass
  :data:`stacks.config.RESERVED_NODE_CLASS` (its ``capacityReservationSelectorTerms``; EKS user guide, "Control
  deployment of workloads into Capacity Reservations with EKS Auto Mode"), the node role the stack gives Auto
  Mode, the nodes' subnets (the zone's, when named) and the cluster security group; the campaign's NodePools use
  it when the spec's ``kubernetes.node_class`` names it (the platform spec must).
* ``existing``: the cluster ``benchctl:cluster_name`` is imported; the stack's kubectl handler gets an
  access entry (cluster admin) on it, and everything below is installed except the pieces named in
  ``benchctl:platform_skip`` (``stacks.config.PLATFORM_PIECES``).
* Add-ons: ``eks-pod-identity-agent`` (not on Auto Mode, where it is built in), ``aws-efs-csi-driver``
  with an EKS Pod Identity role (AWS's managed ``AmazonEFSCSIDriverPolicy``); charts (pins and values
  from :mod:`stacks.platform_values`, validated there against each chart's own ``values.schema.json``):
  NVIDIA and EFA device plugins (node groups only), kube-prometheus-stack (DCGM exporter, Dynamo/KVBM
  scrape, Grafana with ``dashboards/``; ClusterIP Services only), ``dynamo-platform`` (CRDs, operator).
* Model storage: an encrypted EFS file system (``benchctl:model_fs_removal``, default retain), a mount
  target per subnet admitting NFS from the cluster security group only, and the manifests of
  :mod:`stacks.platform_values` (StorageClass, the RWX claim, the download Job).
* The HF token: a Secrets Manager secret the user fills (never a parameter); a CronJob in the namespace
  (:func:`token_sync_manifests`, its own service account with an EKS Pod Identity role that may read that
  one secret) copies it into the Kubernetes secret ``hf-token`` (key ``HF_TOKEN``) that the campaign's
  prefetch and the download Job read.
* Our RBAC and admission policies (``stacks/kubernetes/``), for the namespace the campaign uses.

Everything the control plane needs to know is :attr:`PlatformStack.outputs` (also CfnOutputs):
``app.py`` builds the control-plane configuration from it, so no name is typed twice.
Synth is offline and needs no Docker: the kubectl handler's layer is the pinned PyPI package.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from aws_cdk import (
    aws_eks as eks_l1,  # the CloudFormation resources (CfnAddon, ...): in aws_eks in every release
)
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from benchctl.aws.k8s.admission import admission_params, allow_list_from_ceilings
from benchctl.constants import POD_IDENTITY_ADDON
from benchctl.planning.placement import load_placeable_spec
from benchctl.spec.model import CampaignSpec
from stacks import platform_manifests as pm
from stacks import platform_network as network
from stacks import platform_nodes as nodes
from stacks import platform_values as charts
from stacks.cluster_objects import (
    ROOT,
    TOKEN_SYNC,
    rbac_manifests,
    token_sync_manifests,
)
from stacks.config import Config, ConfigError
from stacks.gpu_capacity import RESERVED_NODE_CLASS

# EKS standard support for 1.35 runs into 2027 (EKS Kubernetes version calendar); kubectl of the handler's
# layer (aws-cdk.lambda-layer-kubectl-v35, requirements-dev.txt) is within one minor version of it
KUBERNETES_VERSION = eks.KubernetesVersion.V1_35
EFS_CSI_ADDON, EFS_CSI_SA = "aws-efs-csi-driver", "efs-csi-controller-sa"
HELM_TIMEOUT = Duration.minutes(10)  # below the kubectl handler's 900 s: a timed-out chart fails, never hangs CFN


@dataclass(frozen=True)
class PlatformOutputs:
    """What the platform made, by the names the control plane and the specs use."""

    cluster_name: str
    namespace: str
    nodegroups: tuple[str, ...]  # the node groups the functions may scale: GPU and the rehearsal's (none on Auto Mode)
    hf_token_secret: str  # the Kubernetes secret with key HF_TOKEN
    model_pvc: str  # the ReadWriteMany claim of the model cache
    capacity: str  # nodegroups | auto-mode | existing
    provenance: str = ""  # JSON: the monitoring it installed (scrape interval, the dashboards' content hash)


def _nag(scope: IConstruct, *rules: tuple[str, str], applies_to: list[Any] | None = None) -> None:
    NagSuppressions.add_resource_suppressions(scope, [
        {"id": rule, "reason": reason, **({"appliesTo": applies_to} if applies_to else {})} for rule, reason in rules],
        apply_to_children=True)


def platform_spec(config: Config) -> CampaignSpec:
    """The campaign spec the platform is installed for (``benchctl:platform_spec``): its model at its pinned
    revision is downloaded, its namespace, token secret and model claim are created, and its node-group pools
    must be ones the platform makes (or, ``existing``, that ``benchctl:nodegroups`` names). A mismatch stops
    synth naming both sides: the spec then runs on the platform without an edited name."""
    where = f"CDK context 'benchctl:platform_spec' ({config.platform_spec})"
    try:
        spec = load_placeable_spec(ROOT / config.platform_spec)
    except Exception as err:  # the spec loader's own message names the field
        raise ConfigError(f"{where}: not a campaign spec: {err}") from None
    k = spec.kubernetes
    if k.namespace != config.namespace:
        raise ConfigError(f"{where}: its kubernetes.namespace {k.namespace!r} is not benchctl:namespace "
                          f"{config.namespace!r}; give them one name")
    reserved = config.gpu_capacity.get(RESERVED_NODE_CLASS)
    if reserved is not None and config.platform_capacity == "auto-mode" and k.node_class != RESERVED_NODE_CLASS:
        raise ConfigError(f"{where}: benchctl:gpu_capacity makes the NodeClass {RESERVED_NODE_CLASS!r} for reservation "
                          f"{reserved.reservation_id}, but the spec's kubernetes.node_class is {k.node_class!r}: name "
                          f"{RESERVED_NODE_CLASS!r} there, or its NodePools never draw from the reservation")
    for pool in spec.pools:
        if pool.provider == "auto-mode" and config.platform == "new" and config.platform_capacity != "auto-mode":
            raise ConfigError(f"{where}: pool {pool.name} is an auto-mode pool; the platform makes node groups "
                              "(benchctl:platform_capacity=nodegroups): use auto-mode or a managed-nodegroup pool")
        if pool.provider == "managed-nodegroup":
            if config.platform == "new" and config.platform_capacity == "auto-mode":
                raise ConfigError(f"{where}: pool {pool.name} names node group {pool.nodegroup!r}, but an Auto Mode "
                                  "platform makes none; use benchctl:platform_capacity=nodegroups or an auto-mode pool")
            if pool.nodegroup not in config.nodegroups:
                raise ConfigError(f"{where}: pool {pool.name} names node group {pool.nodegroup!r}, not one of "
                                  f"benchctl:nodegroups {list(config.nodegroups)}")
            made = config.gpu_instance_types.get(pool.nodegroup or "")
            if config.platform == "new" and made != pool.instance_type:
                raise ConfigError(f"{where}: pool {pool.name} expects {pool.instance_type} in node group "
                                  f"{pool.nodegroup!r}; benchctl:gpu_instance_types makes it of {made}")
    return spec


class PlatformStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: Config, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        if config.platform not in ("new", "existing"):
            raise ConfigError(f"PlatformStack: benchctl:platform={config.platform} makes no platform stack")
        self.config = config
        self.skip = set(config.platform_skip)
        self.auto_mode = config.platform == "new" and config.platform_capacity == "auto-mode"
        self.namespace = config.namespace
        self.spec = platform_spec(config)
        self.kubectl_layer = KubectlV35Layer(self, "KubectlLayer")
        self.capacity: list[Construct] = []  # what the charts' pods need first (a node to run on, the access)
        self.zone_subnets: dict[str, ec2.ISubnet] = {}  # a new VPC's subnet in each zone gpu_capacity names
        if config.platform == "new":
            self.vpc, self.subnets, self.zone_subnets = network.new_network(self, config)
            self.cluster: Any = self._new_cluster()  # eks.Cluster | eks.ICluster (imported)
            cluster_sg = self.cluster.cluster_security_group_id
        else:
            self.vpc, self.subnets = network.given_network(self, config)
            self.cluster = self._existing_cluster()
            cluster_sg = config.cluster_security_group_id or ""
        scalable: tuple[str, ...] = ()  # the node groups the functions may scale: the GPU groups, the rehearsal's
        if config.platform == "new" and not self.auto_mode:
            scalable = self._nodegroups()
        self._addons()
        if self.auto_mode and RESERVED_NODE_CLASS in config.gpu_capacity:
            self._reserved_node_class()
        self.token_secret = self._secret()
        self.fs = None if "model-storage" in self.skip else self._file_system(cluster_sg)
        self.settings = charts.settings_from_spec(
            self.spec, cluster_name=config.cluster_name, region=self.region,
            efs_file_system_id=self.fs.file_system_id if self.fs else "-", hf_secret_arn=self.token_secret.secret_arn,
            auto_mode=self.auto_mode, gpu_nodegroups=tuple(config.nodegroups),
            skip_charts=frozenset(self.skip & set(charts.CHARTS)),
            model_reclaim_policy="Retain" if config.model_fs_removal == "retain" else "Delete")
        # the plan's order: base resources -> GPU device plugins -> monitoring -> Dynamo -> model weights
        # on an existing cluster the namespace may hold more than ours: cdk destroy leaves it (and what is in it)
        self.base = self._manifest("BaseNamespace", [pm.namespace_manifest(self.settings)], after=self.capacity,
                                   keep=config.platform == "existing")
        self._token_sync()
        if "rbac" not in self.skip:
            self._manifest("Rbac", rbac_manifests(self.namespace, self._admission_params()), after=[self.base])
        self._charts()
        if self.fs is not None:
            self._model_storage()
        self.outputs = PlatformOutputs(
            cluster_name=config.cluster_name, namespace=self.namespace,
            nodegroups=scalable if config.platform == "new" else tuple(config.nodegroups),
            hf_token_secret=self.spec.kubernetes.hf_token_secret, model_pvc=self.spec.kubernetes.model_pvc,
            capacity=config.platform_capacity if config.platform == "new" else "existing",
            provenance=pm.monitoring_provenance(self.settings))
        for name, value in (("ClusterName", self.outputs.cluster_name), ("Namespace", self.outputs.namespace),
                            ("Nodegroups", ",".join(self.outputs.nodegroups) or "-"),
                            ("HfTokenKubernetesSecret", self.outputs.hf_token_secret),
                            ("ModelClaim", self.outputs.model_pvc), ("Capacity", self.outputs.capacity)):
            CfnOutput(self, name, value=value)
        CfnOutput(self, "HfTokenSecretArn", value=self.token_secret.secret_arn,
                  description="fill it: aws secretsmanager put-secret-value --secret-id <this> --secret-string hf_...")
        self._cdk_owned(self.cluster if isinstance(self.cluster, eks.Cluster) else self.node.find_child("KubectlProvider"))

    # ------------------------------------------------------------------------------------------ cluster

    def _new_cluster(self) -> eks.Cluster:
        c = self.config
        capacity: dict[str, Any] = (
            {"default_capacity_type": eks.DefaultCapacityType.AUTOMODE,
             "compute": eks.ComputeConfig(node_pools=["system", "general-purpose"], **self._auto_node_role())}
            if self.auto_mode else {"default_capacity_type": eks.DefaultCapacityType.NODEGROUP, "default_capacity": 0})
        cluster = eks.Cluster(
            self, "Cluster", cluster_name=c.cluster_name, version=KUBERNETES_VERSION, vpc=self.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=self.subnets)],
            # the functions (outside the VPC unless benchctl:vpc_id) and the kubectl handler reach the API
            # through the public endpoint, authenticated by IAM and authorised by access entries
            endpoint_access=eks.EndpointAccess.PUBLIC_AND_PRIVATE,
            cluster_logging=[eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT,
                             eks.ClusterLoggingTypes.AUTHENTICATOR, eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                             eks.ClusterLoggingTypes.SCHEDULER],
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=self.kubectl_layer),
            **capacity)
        # the control-plane log group EKS writes to, made by the stack (a month's retention) so that cdk destroy
        # removes it; EKS would otherwise create it, without retention, and leave it behind
        cluster_logs = logs.LogGroup(self, "ClusterLogs", log_group_name=f"/aws/eks/{c.cluster_name}/cluster",
                                     retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY)
        cluster.node.add_dependency(cluster_logs)
        _nag(cluster, ("AwsSolutions-EKS1", "public and private endpoint on purpose: the benchctl functions run "
                       "outside the VPC (unless benchctl:vpc_id places them) and every request is IAM-authenticated "
                       "and authorised by access entries (authentication mode API, no aws-auth ConfigMap)"),
             ("AwsSolutions-IAM4", "AWS's managed EKS cluster and Auto Mode policies (AmazonEKSClusterPolicy and "
              "co.), which EKS documents as the cluster role's and node role's policies"))
        return cluster

    def _existing_cluster(self) -> eks.ICluster:
        c = self.config
        kwargs: dict[str, Any] = {}
        if self.subnets:  # a private endpoint: the handler in the nodes' subnets
            kwargs["private_subnets"] = self.subnets
        attrs: dict[str, Any] = {"cluster_name": c.cluster_name, "vpc": self.vpc}
        if c.cluster_security_group_id:
            attrs["cluster_security_group_id"] = c.cluster_security_group_id
        cluster = eks.Cluster.from_cluster_attributes(self, "Cluster", **attrs)
        provider = eks.KubectlProvider(self, "KubectlProvider", cluster=cluster, kubectl_layer=self.kubectl_layer,
                                       **kwargs)
        # the handler's role may administer the cluster (it installs CRDs, cluster roles, charts): an access entry
        access = eks.AccessEntry(self, "KubectlAccess", cluster=cluster, principal=provider.role.role_arn,  # type: ignore[union-attr]
                                 access_policies=[eks.AccessPolicy.from_access_policy_name(
                                     "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)])
        imported = eks.Cluster.from_cluster_attributes(self, "ClusterWithKubectl", kubectl_provider=provider, **attrs)
        self.capacity.append(access)
        return imported

    def _nodegroups(self) -> tuple[str, ...]:
        """The managed node groups (:mod:`stacks.platform_nodes`): the GPU groups', then the rehearsal's name."""
        assert isinstance(self.cluster, eks.Cluster)
        self.capacity += nodes.make_nodegroups(self, self.cluster, self.config, self.subnets, self.zone_subnets)
        return (*self.config.nodegroups, nodes.rehearsal_nodegroup())

    def _auto_node_role(self) -> dict[str, Any]:
        """With a reserved NodeClass to make, the Auto Mode node role is the stack's own (the policies CDK gives
        the one it would generate), so that the NodeClass can name it: a NodeClass's ``role`` needs an access
        entry, which EKS makes for the cluster's Auto Mode node role (EKS user guide, "Create a Node Class")."""
        self.auto_node_role: iam.Role | None = None
        if RESERVED_NODE_CLASS not in self.config.gpu_capacity:
            return {}
        role = iam.Role(self, "AutoModeNodeRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(n) for n in (
                            "AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")])
        _nag(role, ("AwsSolutions-IAM4", "the EKS node role's AWS managed policies (AmazonEKSWorkerNodePolicy, "
                    "AmazonEC2ContainerRegistryReadOnly), as aws-cdk-lib gives the Auto Mode node role it generates"))
        self.auto_node_role = role
        return {"node_role": role}

    def _reserved_node_class(self) -> None:
        """The Auto Mode NodeClass that draws from ``benchctl:gpu_capacity``'s reservation (:data:`RESERVED_NODE_CLASS`)."""
        cap = self.config.gpu_capacity[RESERVED_NODE_CLASS]
        assert self.auto_node_role is not None and cap.reservation_id
        subnets = [self.zone_subnets[cap.zone]] if cap.zone else self.subnets
        self._manifest("ReservedNodeClass", [pm.reserved_node_class(
            RESERVED_NODE_CLASS, role=self.auto_node_role.role_name, subnet_ids=[s.subnet_id for s in subnets],
            security_group_id=self.cluster.cluster_security_group_id, reservation_id=cap.reservation_id)])

    # ------------------------------------------------------------------------------------------ add-ons

    def _addons(self) -> None:
        agent: Construct | None = None
        if not self.auto_mode and POD_IDENTITY_ADDON not in self.skip:
            agent = eks.Addon(self, "PodIdentityAgent", cluster=self.cluster, addon_name=POD_IDENTITY_ADDON)
        self.efs_addon: Construct | None = None
        if "aws-efs-csi-driver" in self.skip:
            return
        role = self._pod_identity_role("EfsCsiRole", "the EFS CSI driver's controller: access points of the model "
                                                     "file system")
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(
            "service-role/AmazonEFSCSIDriverPolicy"))
        _nag(role, ("AwsSolutions-IAM4", "AmazonEFSCSIDriverPolicy, AWS's managed policy for the EFS CSI driver "
                    "(EKS user guide, 'Store an elastic file system with Amazon EFS'); its access-point actions are "
                    "conditioned on the driver's own tags"))
        addon = eks_l1.CfnAddon(self, "EfsCsiDriver", cluster_name=self.cluster.cluster_name, addon_name=EFS_CSI_ADDON,
                             resolve_conflicts="OVERWRITE", pod_identity_associations=[
                                 eks_l1.CfnAddon.PodIdentityAssociationProperty(role_arn=role.role_arn,
                                                                             service_account=EFS_CSI_SA)])
        self._after_cluster(addon)
        for dep in self.capacity:  # its controller is a Deployment: without a node the add-on stays DEGRADED
            addon.node.add_dependency(dep)
        if agent is not None:  # its controller's credentials come from the Pod Identity agent
            addon.node.add_dependency(agent)
        self.efs_addon = addon

    def _pod_identity_role(self, cid: str, what: str) -> iam.Role:
        pods = iam.ServicePrincipal("pods.eks.amazonaws.com")
        cond = {"StringEquals": {"aws:SourceAccount": self.account}}
        role = iam.Role(self, cid, assumed_by=pods.with_conditions(cond), description=f"benchctl platform: {what}")
        role.assume_role_policy.add_statements(iam.PolicyStatement(  # type: ignore[union-attr]
            actions=["sts:TagSession"], principals=[pods], conditions=cond))
        return role

    def _after_cluster(self, construct: Construct) -> None:
        if isinstance(self.cluster, eks.Cluster):
            construct.node.add_dependency(self.cluster)

    # ------------------------------------------------------------------------------------------ kubernetes

    def _manifest(self, cid: str, docs: list[dict[str, Any]], *, after: list[Construct] | None = None,
                  keep: bool = False) -> Construct:
        m = eks.KubernetesManifest(self, cid, cluster=self.cluster, manifest=docs, overwrite=True,
                                   removal_policy=RemovalPolicy.RETAIN if keep else RemovalPolicy.DESTROY)
        for dep in after or []:
            m.node.add_dependency(dep)
        return m

    def _admission_params(self) -> dict[str, Any]:
        """The admission policies' allow-list: the deployment's ceilings (as Plan and ScalePools hold specs to
        them) plus the load image's registry: the given ``benchctl:load_image``'s, else the account's CDK asset
        registry, where the control-plane stack publishes the image it builds."""
        c = self.config
        registry = (c.load_image.split("/")[0] + "/" if c.load_image
                    else f"{self.account}.dkr.ecr.{self.region}.{self.url_suffix}/")
        allow = allow_list_from_ceilings(c.ceilings, load_image_registry=registry, namespace=self.namespace,
                                         node_class=self.spec.kubernetes.node_class)
        return admission_params(allow)

    def _secret(self) -> secretsmanager.Secret:
        secret = secretsmanager.Secret(
            self, "HfToken", description="benchctl: the Hugging Face token (hf_...) the model download uses; "
            "fill it with aws secretsmanager put-secret-value", removal_policy=RemovalPolicy.DESTROY,
            generate_secret_string=secretsmanager.SecretStringGenerator(exclude_punctuation=True, password_length=32))
        _nag(secret, ("AwsSolutions-SMG4", "a Hugging Face access token, issued and rotated by its owner at "
                      "huggingface.co; Secrets Manager cannot rotate it"))
        return secret

    def _token_sync(self) -> None:
        role = self._pod_identity_role("HfTokenReaderRole", f"the {TOKEN_SYNC} CronJob: reads the HF token secret")
        self.token_secret.grant_read(role)
        assoc = eks_l1.CfnPodIdentityAssociation(self, "HfTokenSyncIdentity", cluster_name=self.cluster.cluster_name,
                                              namespace=self.namespace, service_account=TOKEN_SYNC,
                                              role_arn=role.role_arn)
        self._after_cluster(assoc)
        self._manifest("HfTokenSync", token_sync_manifests(self.namespace, self.token_secret.secret_arn, self.region,
                                                           self.spec.kubernetes.hf_token_secret), after=[self.base])

    def _charts(self) -> None:
        """Every release :func:`stacks.platform_values.helm_releases` lists, in its order (each after the one
        before: the Dynamo chart makes its PodMonitors only when the monitoring CRDs exist), with its checked
        values; each waited for (``helm --wait``), so the next starts on a running one."""
        previous: list[Construct] = [self.base, *self.capacity]
        self.charts: dict[str, eks.HelmChart] = {}
        for release in charts.helm_releases(self.settings):
            cid = "".join(p.capitalize() for p in release["chart"].split("-")) + "Chart"
            chart = eks.HelmChart(self, cid, cluster=self.cluster, wait=True, timeout=HELM_TIMEOUT, **release)
            for dep in previous:
                chart.node.add_dependency(dep)
            previous = [chart]
            self.charts[release["chart"]] = chart
        if "kube-prometheus-stack" in self.charts:  # Grafana's dashboards and the KVBM PodMonitor need its CRDs
            self._manifest("Dashboards", [*pm.dashboard_configmaps(self.settings),
                                          pm.kvbm_pod_monitor(self.settings)],
                           after=[self.charts["kube-prometheus-stack"]])

    def _file_system(self, cluster_sg: str) -> efs.FileSystem:
        sg = ec2.SecurityGroup(self, "ModelFsSecurityGroup", vpc=self.vpc, allow_all_outbound=False,
                               description="benchctl model file system: NFS from the cluster nodes only")
        sg.add_ingress_rule(ec2.Peer.security_group_id(cluster_sg), ec2.Port.tcp(2049),
                            "NFS from the EKS cluster security group")
        fs = efs.FileSystem(
            self, "ModelFs", vpc=self.vpc, vpc_subnets=ec2.SubnetSelection(subnets=self.subnets), encrypted=True,
            security_group=sg, performance_mode=efs.PerformanceMode.GENERAL_PURPOSE,
            throughput_mode=efs.ThroughputMode.ELASTIC,
            removal_policy=RemovalPolicy.RETAIN if self.config.model_fs_removal == "retain" else RemovalPolicy.DESTROY)
        CfnOutput(self, "ModelFileSystemId", value=fs.file_system_id)
        return fs

    def _model_storage(self) -> None:
        """The StorageClass, the RWX claim and the one-time download Job (the campaign's own prefetch Job, which
        waits for the token's key in the Kubernetes secret), once the file system's mount targets and the CSI
        driver are there."""
        s = self.settings
        m = self._manifest("ModelStorage", [pm.storage_class_manifest(s), pm.model_claim_manifest(s),
                                            pm.model_download_job(s)], after=[self.base, *self.capacity])
        assert self.fs is not None
        m.node.add_dependency(self.fs)
        if self.efs_addon is not None:
            m.node.add_dependency(self.efs_addon)

    # ------------------------------------------------------------------------------------------ cdk-nag

    def _cdk_owned(self, scope: IConstruct) -> None:
        """What CDK itself creates under ``scope`` (the kubectl handler and its provider framework, the node
        groups' roles) and this project cannot change, each with why it is acceptable."""
        _nag(scope,
             ("AwsSolutions-IAM4", "AWS managed policies on roles CDK creates for EKS: the node roles' "
              "AmazonEKSWorkerNodePolicy, AmazonEKS_CNI_Policy and AmazonEC2ContainerRegistryReadOnly (the EKS user "
              "guide's node IAM role) and the kubectl handler's AWSLambdaBasicExecutionRole/VPC access"),
             ("AwsSolutions-IAM5", "CDK's kubectl handler and custom-resource provider framework: they invoke their "
              "own function's versions (ARN:*), as aws-cdk-lib writes them"),
             ("AwsSolutions-L1", "the runtime of CDK's own kubectl handler and provider framework functions, chosen "
              "by aws-cdk-lib (aws-eks-v2), not by this project"))


def control_plane_config(config: Config, outputs: PlatformOutputs) -> Config:
    """The control plane's configuration with every name the platform decides taken from its outputs: the
    cluster, the node groups the functions may scale (none on Auto Mode) and the namespace. Nothing else
    changes (a spec's ``kubernetes.hf_token_secret``/``model_pvc`` defaults are the platform's names)."""
    return dataclasses.replace(config, cluster_name=outputs.cluster_name, nodegroups=outputs.nodegroups,
                               namespace=outputs.namespace, platform_provenance=outputs.provenance)
