//! The per-attachment CNI variables every plugin of a request runs with, exec'd or native.

/// CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_ARGS of one attachment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationEnv {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: String,
}

impl InvocationEnv {
    /// The variables as an exec'd plugin gets them (CNI_ARGS only when there are any).
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("CNI_CONTAINERID", self.container_id.clone()),
            ("CNI_NETNS", self.netns.clone()),
            ("CNI_IFNAME", self.ifname.clone()),
        ];
        if !self.args.is_empty() {
            v.push(("CNI_ARGS", self.args.clone()));
        }
        v
    }
}
