use super::*;

/// Self-signed test-only pairs (P-256), base64 PEM as a kubeconfig holds them.
const CERT_A: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lVSkxwVzg0b2svTHZRNXRDVE52d210M21vNGlJd0NnWUlLb1pJemowRUF3SXcKRVRFUE1BMEdBMVVFQXd3R2RHVnpkQzFoTUI0WERUSTJNVEl3TnpBME5Ea3dNMW9YRFRNMk1USXdOREEwTkRrdwpNMW93RVRFUE1BMEdBMVVFQXd3R2RHVnpkQzFoTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFClFYclpmbm5KdU1ZUEVFTVp1UlEzR2pRalJ2cWZ2V1g4M2svbUg2WGNORmpYS3ZEWUlWQm1GVW5vOExsQm5kdTAKREcvU0thcmNURnc3SEFTNi85bmR6S05UTUZFd0hRWURWUjBPQkJZRUZQZmJwazg4dDVGQlBMd3paUXFPK0w2NwoySnJ4TUI4R0ExVWRJd1FZTUJhQUZQZmJwazg4dDVGQlBMd3paUXFPK0w2NzJKcnhNQThHQTFVZEV3RUIvd1FGCk1BTUJBZjh3Q2dZSUtvWkl6ajBFQXdJRFNBQXdSUUlnQXVhVUFQNGpkaEo3dDN3Y0s0OElrQ3Z0a0c1T3ZUczAKMklZT1YyTnFPSGtDSVFDTmJXNUdiVElKd1I2bzREUmpJb25kR2RsQ3QvODFrNGVLcGJyUFArbVdudz09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";
const KEY_A: &str = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JR0hBZ0VBTUJNR0J5cUdTTTQ5QWdFR0NDcUdTTTQ5QXdFSEJHMHdhd0lCQVFRZzZSWFMrRERzb25tMFlZWEgKUFQzSnY4M2hVYjdKeW1Sam04eUtZZ0wrdnY2aFJBTkNBQVJCZXRsK2VjbTR4ZzhRUXhtNUZEY2FOQ05HK3ArOQpaZnplVCtZZnBkdzBXTmNxOE5naFVHWVZTZWp3dVVHZDI3UU1iOUlwcXR4TVhEc2NCTHIvMmQzTQotLS0tLUVORCBQUklWQVRFIEtFWS0tLS0tCg==";
const CERT_B: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lVVlJ4bG9Dc1FpZ3lCeisvQzNxZU1HOFM2VDZJd0NnWUlLb1pJemowRUF3SXcKRVRFUE1BMEdBMVVFQXd3R2RHVnpkQzFpTUI0WERUSTJNVEl3TnpBME5Ea3dNMW9YRFRNMk1USXdOREEwTkRrdwpNMW93RVRFUE1BMEdBMVVFQXd3R2RHVnpkQzFpTUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFCndrVjZRNGRTMWFBeGtFM1ZRVC9OYkNpNm9KRWtoRGJ1ZXo5bHJuaE1QcHJRaFdsNGhRa1MrdldIMk5OTjVSWFIKWDF0a3E0TnJXWHg4N01OWW9tQUNxNk5UTUZFd0hRWURWUjBPQkJZRUZJV05OL3lxWG9aRmgzdnJnNkJzMVBNUgp2ald4TUI4R0ExVWRJd1FZTUJhQUZJV05OL3lxWG9aRmgzdnJnNkJzMVBNUnZqV3hNQThHQTFVZEV3RUIvd1FGCk1BTUJBZjh3Q2dZSUtvWkl6ajBFQXdJRFNBQXdSUUlnZnJheFJ0bmRMQ2VSbWtuZmg4dHhubEQyY3ZIK29wR0gKSCtwMzNyNGxIalFDSVFDR1ltV0pJaThFVmZNaHIyN2J6bXNFK1FwRlBqcWV6TTN2M254QU9lclVJUT09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";
const KEY_B: &str = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JR0hBZ0VBTUJNR0J5cUdTTTQ5QWdFR0NDcUdTTTQ5QXdFSEJHMHdhd0lCQVFRZ2ROMm4rd1NrbmVtL2lFNEUKOGFTWnB6UFJMeS9JY09MbXVFcjk3VzhDRnBhaFJBTkNBQVRDUlhwRGgxTFZvREdRVGRWQlA4MXNLTHFna1NTRQpOdTU3UDJXdWVFdyttdENGYVhpRkNSTDY5WWZZMDAzbEZkRmZXMlNyZzJ0WmZIenN3MWlpWUFLcgotLS0tLUVORCBQUklWQVRFIEtFWS0tLS0tCg==";

fn kubeconfig(cluster: &str, user: &str) -> Kubeconfig {
    let text = format!(
        "apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {{cluster: k, user: u, namespace: ns}}
clusters:
- name: k
  cluster:
{cluster}users:
- name: u
  user:
{user}"
    );
    Kubeconfig::from_yaml(&text).expect("kubeconfig")
}

const SERVER: &str = "    server: https://10.0.0.1
    certificate-authority-data: Q0E=
";

fn token(t: &str) -> String {
    format!(
        "    token: {t}
"
    )
}

fn pair(cert: &str, key: &str) -> String {
    format!(
        "    client-certificate-data: {cert}
    client-key-data: {key}
"
    )
}

#[test]
fn only_the_users_inline_credentials_changing_is_a_rotation() {
    let old = kubeconfig(SERVER, &token("t1"));
    assert_eq!(
        change(&old, &kubeconfig(SERVER, &token("t1"))),
        Change::Same
    );
    assert_eq!(
        change(&old, &kubeconfig(SERVER, &token("t2"))),
        Change::Rotation
    );
    let certs = kubeconfig(SERVER, &pair(CERT_A, KEY_A));
    assert_eq!(
        change(&certs, &kubeconfig(SERVER, &pair(CERT_B, KEY_B))),
        Change::Rotation
    );
    let both = |t: &str, c: &str, k: &str| kubeconfig(SERVER, &(token(t) + &pair(c, k)));
    assert_eq!(
        change(&both("t1", CERT_A, KEY_A), &both("t2", CERT_B, KEY_B)),
        Change::Rotation
    );
}

#[test]
fn a_connection_change_is_not_a_rotation() {
    let old = kubeconfig(SERVER, &token("t1"));
    let reconnect = |cluster: &str, user: &str| change(&old, &kubeconfig(cluster, user));
    // Another server, CA, tls-server-name, proxy: engaged again.
    for cluster in [
        "    server: https://10.0.0.2
    certificate-authority-data: Q0E=
"
        .to_string(),
        "    server: https://10.0.0.1
    certificate-authority-data: Q0I=
"
        .to_string(),
        format!(
            "{SERVER}    tls-server-name: other
"
        ),
        format!(
            "{SERVER}    proxy-url: http://proxy:3128
"
        ),
    ] {
        assert_eq!(
            reconnect(&cluster, &token("t2")),
            Change::Reconnect,
            "{cluster}"
        );
    }
    // Another kind of credential; an exec plugin (kube's own layer, as before).
    assert_eq!(reconnect(SERVER, &pair(CERT_A, KEY_A)), Change::Reconnect);
    let exec = "    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kubelogin
";
    assert_eq!(reconnect(SERVER, exec), Change::Reconnect);
    assert_eq!(
        change(&kubeconfig(SERVER, exec), &kubeconfig(SERVER, exec)),
        Change::Reconnect
    );
    // Another namespace of the context.
    let mut other_ns = kubeconfig(SERVER, &token("t2"));
    other_ns.contexts[0]
        .context
        .as_mut()
        .expect("context")
        .namespace = Some("other".into());
    assert_eq!(change(&old, &other_ns), Change::Reconnect);
    // Basic auth is not rotated in place either.
    let basic = kubeconfig(
        SERVER,
        "    username: a
    password: b
",
    );
    assert_eq!(change(&basic, &basic), Change::Reconnect);
}

#[test]
fn the_cell_sends_the_new_token_and_presents_the_new_certificate() {
    let cell = Credentials::of(&kubeconfig(SERVER, &(token("t1") + &pair(CERT_A, KEY_A))))
        .expect("inline")
        .expect("a cell");
    let bearer = |cell: &Credentials| {
        let req = cell.authorize(http::Request::new(()));
        req.headers()[http::header::AUTHORIZATION].clone()
    };
    assert_eq!(bearer(&cell), "Bearer t1");
    assert!(bearer(&cell).is_sensitive());
    let resolver = FromCell(cell.clone());
    let presented = |r: &FromCell| r.resolve(&[], &[]).expect("a certificate").cert[0].clone();
    let first = presented(&resolver);
    cell.replace(&kubeconfig(SERVER, &(token("t2") + &pair(CERT_B, KEY_B))))
        .expect("rotated");
    assert_eq!(bearer(&cell), "Bearer t2");
    assert_ne!(
        presented(&resolver),
        first,
        "the next handshake presents the new pair"
    );
    assert_eq!(
        cell.identity_generation(),
        1,
        "a new connection for the new pair"
    );
    cell.replace(&kubeconfig(SERVER, &(token("t2") + &pair(CERT_B, KEY_B))))
        .expect("the same again");
    assert_eq!(
        cell.identity_generation(),
        1,
        "the same pair keeps its connection"
    );
    // A broken new pair is refused, named by its field only; the cell keeps what it has.
    let refused = cell
        .replace(&kubeconfig(
            SERVER,
            &(token("t3") + &pair(CERT_B, "U0VDUkVU")),
        ))
        .expect_err("refused");
    assert!(
        refused.starts_with("client-key-data") && !refused.contains("SECRET"),
        "{refused}"
    );
    assert_eq!(bearer(&cell), "Bearer t2");
    assert!(!format!("{cell:?}").contains("t2"));
    // An exec plugin keeps kube's own layer.
    let exec = "    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kubelogin
";
    assert!(
        Credentials::of(&kubeconfig(SERVER, exec))
            .expect("ok")
            .is_none()
    );
}
