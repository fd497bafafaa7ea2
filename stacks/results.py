"""Results stack: what must outlive the control plane. The lake bucket, its Glue catalog, Athena.

* Bucket: SSE-S3, TLS only, public access blocked, versioned (an overwrite or delete keeps the old
  version), retained when the stack goes; server access logs to a separate log bucket. Lifecycle:
  raw AIPerf artifacts (``lake/raw/``) move to Glacier Instant Retrieval after ``raw_archive_days``
  (kept, never expired: raw artifacts are the evidence everything else is derived from); an overwritten
  or deleted object's old version is kept for 365 days (``NONCURRENT_VERSION_DAYS``: a year to notice that
  evidence was rewritten and restore it; Object Lock was not chosen: it can only be turned on for a new
  bucket, would need a migration of existing deployments, and in compliance mode cannot be undone);
  incomplete multipart uploads are aborted after 7.
* Glue: one database, one table per ``benchctl.lake.schema`` table (columns, types and partition keys
  generated from that module, the same one ingestion and DuckDB use), parquet at
  ``s3://<bucket>/lake/<table>/``. Partitions are registered by the writer as it writes them
  (``benchctl.aws.s3``), so neither a crawler nor ``MSCK REPAIR`` is ever needed. Partition
  projection is deliberately not used: ``campaign_id`` and ``experiment`` are free-form names, and
  projecting them (type ``injected``) would make every query without an equality filter on them fail,
  including the comparison views, which join and group across experiments.
* Athena: a workgroup with its result location in the bucket, configuration enforced (clients cannot
  override the location or encryption) and a bytes-scanned limit per query, deleted with the stack
  (results stay in the bucket) so that a redeploy after a destroy can create it again; one named query per view
  file (``CREATE OR REPLACE VIEW ...`` with the file's own Trino SQL). The report function runs them
  (in dependency order) before it queries, so a fresh deployment has the views after its first run.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_athena as athena
from aws_cdk import aws_glue as glue
from aws_cdk import aws_s3 as s3
from cdk_nag import NagSuppressions
from constructs import Construct

from benchctl.analysis.views import athena_view_ddl
from benchctl.constants import ATHENA_PREFIX, LAKE_PREFIX
from benchctl.lake import schema
from stacks.config import Config

NONCURRENT_VERSION_DAYS = 365  # how long an overwritten or deleted object's old version is kept (raw evidence too)
PARQUET = {
    "input_format": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    "output_format": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    "serde": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
}


class ResultsStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: Config, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.config = config
        logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            removal_policy=RemovalPolicy.RETAIN,
        )
        NagSuppressions.add_resource_suppressions(
            logs, [{"id": "AwsSolutions-S1", "reason": "this IS the access-log bucket; logging it into "
                                                       "itself would loop"}])
        self.bucket = s3.Bucket(
            self,
            "Lake",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            versioned=True,
            server_access_logs_bucket=logs,
            server_access_logs_prefix="lake-bucket/",
            removal_policy=RemovalPolicy.RETAIN,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="archive-raw-artifacts",
                    prefix=f"{LAKE_PREFIX}/raw/",
                    transitions=[s3.Transition(storage_class=s3.StorageClass.GLACIER_INSTANT_RETRIEVAL,
                                               transition_after=Duration.days(config.raw_archive_days))],
                ),
                s3.LifecycleRule(id="expire-old-versions",  # one rule for the whole bucket: with a shorter rule
                                 # on an overlapping prefix, S3 would expire raw evidence's versions the sooner
                                 noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS)),
                s3.LifecycleRule(id="abort-multipart", abort_incomplete_multipart_upload_after=Duration.days(7)),
            ],
        )
        self.database_name = f"benchctl_{config.env_name.replace('-', '_')}"
        database = glue.CfnDatabase(
            self,
            "Database",
            catalog_id=self.account,
            database_input=glue.CfnDatabase.DatabaseInputProperty(
                name=self.database_name, description="benchctl results lake (tables from benchctl/lake/schema.py)"
            ),
        )
        self.tables: dict[str, glue.CfnTable] = {}
        for name in schema.table_names():
            cols = schema.glue_columns(name)
            table = glue.CfnTable(
                self,
                f"Table{name.title().replace('_', '')}",
                catalog_id=self.account,
                database_name=self.database_name,
                table_input=glue.CfnTable.TableInputProperty(
                    name=name,
                    description=schema.TABLES[name].description,
                    table_type="EXTERNAL_TABLE",
                    parameters={"classification": "parquet", "EXTERNAL": "TRUE"},
                    partition_keys=[glue.CfnTable.ColumnProperty(**c) for c in cols["partition_keys"]],
                    storage_descriptor=glue.CfnTable.StorageDescriptorProperty(
                        columns=[glue.CfnTable.ColumnProperty(**c) for c in cols["columns"]],
                        location=f"s3://{self.bucket.bucket_name}/{LAKE_PREFIX}/{name}/",
                        input_format=PARQUET["input_format"],
                        output_format=PARQUET["output_format"],
                        serde_info=glue.CfnTable.SerdeInfoProperty(serialization_library=PARQUET["serde"]),
                    ),
                ),
            )
            table.add_dependency(database)
            self.tables[name] = table
        self.workgroup_name = f"benchctl-{config.env_name}"
        workgroup = athena.CfnWorkGroup(
            self,
            "WorkGroup",
            name=self.workgroup_name,
            description="benchctl queries: results in the lake bucket, configuration enforced",
            # nothing of value lives in the workgroup (results are in the retained bucket, the named
            # queries come from this stack): deleted with the stack, so a redeploy can take its name again
            recursive_delete_option=True,
            state="ENABLED",
            work_group_configuration=athena.CfnWorkGroup.WorkGroupConfigurationProperty(
                enforce_work_group_configuration=True,
                publish_cloud_watch_metrics_enabled=True,
                bytes_scanned_cutoff_per_query=config.athena_bytes_scanned_cutoff,
                engine_version=athena.CfnWorkGroup.EngineVersionProperty(
                    selected_engine_version="Athena engine version 3"),
                result_configuration=athena.CfnWorkGroup.ResultConfigurationProperty(
                    output_location=f"s3://{self.bucket.bucket_name}/{ATHENA_PREFIX}/",
                    encryption_configuration=athena.CfnWorkGroup.EncryptionConfigurationProperty(
                        encryption_option="SSE_S3"),
                ),
            ),
        )
        workgroup.apply_removal_policy(RemovalPolicy.DESTROY)
        self.view_ddl = athena_view_ddl()
        for view, ddl in self.view_ddl:
            q = athena.CfnNamedQuery(
                self,
                f"View{view.title().replace('_', '')}",
                database=self.database_name,
                work_group=self.workgroup_name,
                name=f"benchctl {view}",
                description=f"creates view {view} from sql/views/{view}.sql",
                query_string=ddl,
            )
            q.add_dependency(workgroup)
            q.add_dependency(database)
        self.workgroup = workgroup
        CfnOutput(self, "BucketName", value=self.bucket.bucket_name)
        CfnOutput(self, "GlueDatabase", value=self.database_name)
        CfnOutput(self, "AthenaWorkGroup", value=self.workgroup_name)

    # ARNs the control plane's least-privilege policies name
    def glue_arns(self) -> list[str]:
        base = f"arn:{self.partition}:glue:{self.region}:{self.account}"
        return [f"{base}:catalog", f"{base}:database/{self.database_name}", f"{base}:table/{self.database_name}/*"]

    def workgroup_arn(self) -> str:
        return f"arn:{self.partition}:athena:{self.region}:{self.account}:workgroup/{self.workgroup_name}"
