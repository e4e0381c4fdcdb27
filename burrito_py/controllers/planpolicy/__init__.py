"""Plan policies (TerraformPlanPolicy, ClusterTerraformPlanPolicy): the book layers are judged by, and their status."""
